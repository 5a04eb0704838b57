//! PHP's ini scanner and parser in normal mode (php-src 8.2
//! `Zend/zend_ini_scanner.l` and `Zend/zend_ini_parser.y`,
//! `ZEND_INI_SCANNER_NORMAL`), for one line at a time: php-fpm feeds
//! `zend_parse_ini_string` each line of its files on its own
//! (`fpm_conf_load_ini_file` in `sapi/fpm/fpm/fpm_conf.c`), so nothing
//! spans lines here either.
//!
//! Owns: turning a line into statements (a section, `name = value`,
//! `name[key] = value`) with PHP's value rules: `;` comments outside quotes,
//! trimmed unquoted text, `"…"` with `\"`, `\\` and `\$`, raw `'…'`,
//! adjacent pieces concatenated (a quoted piece eats the blanks around
//! it), `yes`/`on`/`true` → `1` and `no`/`off`/`false`/`none`/`null` →
//! empty (case-insensitive), `${VAR}` from the environment, PHP constants
//! ([`constant`]) and the operators `| & ^ ~ ! ( )` on integers. The
//! scanner's tokens compete by longest match, ties going to the rule
//! written first in `zend_ini_scanner.l`, as re2c decides.
//!
//! Must not touch: files, the process environment (the caller passes a
//! lookup), anything php-fpm does after parsing (directive names, `$pool`).

/// One statement of a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Statement {
    /// `[name]`.
    Section(String),
    /// `name = value`.
    Entry { name: String, value: String },
    /// `name[key] = value` (`key` empty for `name[] = value`).
    Array {
        name: String,
        key: String,
        value: String,
    },
    /// A name alone (`name` without `=`): php-fpm's "value is NULL".
    NoValue(String),
}

/// What a line's scan found besides its statements: constants php-fpm
/// would replace that fpmd does not know ([`constant`]), by name.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Scan {
    pub(crate) statements: Vec<Statement>,
    /// Names of unquoted words that look like PHP constants fpmd cannot
    /// evaluate (`PHP_VERSION`: the php binary's own value).
    pub(crate) unknown_constants: Vec<String>,
    /// Constants that were replaced, with their value (`LC_ALL` → `6`).
    pub(crate) replaced_constants: Vec<(String, String)>,
}

/// The PHP constants fpmd evaluates where PHP's ini scanner would: core's
/// error levels (`Zend/zend_errors.h`, PHP 8.2: `E_ALL` = 32767), the
/// locale categories of glibc (`LC_*`, registered by ext/standard), and a
/// few fixed core values. Any other constant (from an extension, or one
/// whose value depends on the php binary such as `PHP_VERSION`) is kept as
/// its name and reported in [`Scan::unknown_constants`] when it starts
/// with `PHP_` or `E_`.
pub(crate) fn constant(name: &str) -> Option<&'static str> {
    Some(match name {
        "E_ERROR" => "1",
        "E_WARNING" => "2",
        "E_PARSE" => "4",
        "E_NOTICE" => "8",
        "E_CORE_ERROR" => "16",
        "E_CORE_WARNING" => "32",
        "E_COMPILE_ERROR" => "64",
        "E_COMPILE_WARNING" => "128",
        "E_USER_ERROR" => "256",
        "E_USER_WARNING" => "512",
        "E_USER_NOTICE" => "1024",
        "E_STRICT" => "2048",
        "E_RECOVERABLE_ERROR" => "4096",
        "E_DEPRECATED" => "8192",
        "E_USER_DEPRECATED" => "16384",
        "E_ALL" => "32767",
        "LC_CTYPE" => "0",
        "LC_NUMERIC" => "1",
        "LC_TIME" => "2",
        "LC_COLLATE" => "3",
        "LC_MONETARY" => "4",
        "LC_MESSAGES" => "5",
        "LC_ALL" => "6",
        "DIRECTORY_SEPARATOR" => "/",
        "PATH_SEPARATOR" => ":",
        "PHP_OS" => "Linux",
        "PHP_OS_FAMILY" => "Linux",
        "PHP_INT_SIZE" => "8",
        "PHP_INT_MAX" => "9223372036854775807",
        "PHP_INT_MIN" => "-9223372036854775808",
        "PHP_MAXPATHLEN" => "4096",
        "PHP_DEBUG" => "0",
        "PHP_ZTS" => "0",
        _ => return None,
    })
}

/// Scans one line (without its `\n`). `getenv` answers `${NAME}`.
/// Errors: a syntax error as PHP's parser would refuse it, described.
pub(crate) fn scan_line(
    line: &str,
    getenv: &dyn Fn(&str) -> Option<String>,
) -> Result<Scan, String> {
    // php-fpm appends the newline the scanner's rules end on.
    let mut text = line.as_bytes().to_vec();
    text.push(b'\n');
    let mut s = Scanner {
        b: &text,
        i: 0,
        getenv,
        out: Scan::default(),
    };
    s.statements()?;
    Ok(s.out)
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
    getenv: &'a dyn Fn(&str) -> Option<String>,
    out: Scan,
}

/// Where a token is read: the three scanner states that read values.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `ST_VALUE`: after `=`.
    Value,
    /// `ST_OFFSET`: inside `name[…]`.
    Offset,
    /// `ST_SECTION_VALUE`: inside `[…]`.
    Section,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    /// `'…'`, a quoted string, a number, an unquoted run, blanks, a
    /// constant's value, a variable's value: pieces of a string.
    Piece(String),
    Op(u8),
    True,
    False,
    /// The end of the value (end of line or a comment), or `]`.
    End,
    /// `=` inside a value.
    Equals,
}

fn is_blank(c: u8) -> bool {
    c == b' ' || c == b'\t'
}

fn label_char(c: u8) -> bool {
    !matches!(
        c,
        b'=' | b'\n'
            | b'\r'
            | b'\t'
            | b';'
            | b'&'
            | b'|'
            | b'^'
            | b'$'
            | b'~'
            | b'('
            | b')'
            | b'{'
            | b'}'
            | b'!'
            | b'"'
            | b'['
    )
}

fn trim_blanks(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|&c| !c.is_ascii_whitespace())
        .unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|&c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &s[start..end.max(start)]
}

fn string(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `atoi`: leading blanks, a sign, digits; 0 when none (as C's).
fn atoi(s: &str) -> i32 {
    let t = s.trim_start();
    let (neg, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let mut n: i64 = 0;
    for c in digits.bytes().take_while(u8::is_ascii_digit) {
        n = (n * 10 + i64::from(c - b'0')).min(i64::from(u32::MAX) + 1);
    }
    let n = if neg { -n } else { n };
    // Wraps as the C library's does on this platform for out-of-range text.
    n as i32
}

/// The longest match among the rules tried so far: (length, the rule's
/// order in `zend_ini_scanner.l`, the token kind); a tie goes to the
/// rule written first.
#[derive(Default)]
struct Longest(Option<(usize, u8, u8)>);

impl Longest {
    /// Rule `order` matches `len` bytes (none when 0) as a `kind` token.
    fn consider(&mut self, len: usize, order: u8, kind: u8) {
        if len > 0
            && self
                .0
                .is_none_or(|(l, o, _)| len > l || (len == l && order < o))
        {
            self.0 = Some((len, order, kind));
        }
    }
}

/// The syntax error when no rule matches at `c` in `mode`.
fn no_token(c: u8, mode: Mode) -> String {
    match c {
        b'\n' | 0 => format!(
            "syntax error: unterminated {}",
            match mode {
                Mode::Section => "section name (missing ']')",
                Mode::Offset => "'[' key (missing ']')",
                Mode::Value => "value",
            }
        ),
        b'\'' => {
            "syntax error: unterminated or empty '…' string (write \"\" for an empty value)".into()
        }
        c => format!("syntax error, unexpected '{}'", c as char),
    }
}

impl<'a> Scanner<'a> {
    fn peek(&self, at: usize) -> u8 {
        self.b.get(self.i + at).copied().unwrap_or(0)
    }

    fn rest(&self) -> &'a [u8] {
        &self.b[self.i..]
    }

    fn blanks_from(&self, at: usize) -> usize {
        self.b[at..].iter().take_while(|&&c| is_blank(c)).count()
    }

    /// `INITIAL`: statements until the end of the line.
    fn statements(&mut self) -> Result<(), String> {
        loop {
            self.i += self.blanks_from(self.i);
            match self.peek(0) {
                b'\n' | 0 => return Ok(()),
                b';' => return Ok(()),
                b'[' => {
                    self.i += 1;
                    let name = self.string_list(Mode::Section)?;
                    self.out.statements.push(Statement::Section(name));
                }
                _ => return self.entry(),
            }
        }
    }

    fn entry(&mut self) -> Result<(), String> {
        let start = self.i;
        let len = self.rest().iter().take_while(|&&c| label_char(c)).count();
        if len == 0 {
            return Err(format!(
                "syntax error, unexpected '{}'",
                self.peek(0) as char
            ));
        }
        let raw_label = &self.b[start..start + len];
        self.i += len;
        let name = string(trim_blanks(raw_label));
        let word = name.to_ascii_lowercase();
        if matches!(
            word.as_str(),
            "true" | "on" | "yes" | "false" | "off" | "no" | "none" | "null"
        ) {
            return Err(format!(
                "syntax error, unexpected BOOL '{name}' (a directive cannot be named so)"
            ));
        }
        if self.peek(0) == b'[' {
            self.i += 1;
            self.i += self.blanks_from(self.i);
            let key = self.string_list(Mode::Offset)?;
            self.i += self.blanks_from(self.i);
            if self.peek(0) != b'=' {
                return Err(format!(
                    "syntax error: '{name}[{key}]' must be followed by '='"
                ));
            }
            self.i += 1;
            let value = self.value()?;
            self.out
                .statements
                .push(Statement::Array { name, key, value });
            return Ok(());
        }
        self.i += self.blanks_from(self.i);
        match self.peek(0) {
            b'=' => {
                self.i += 1;
                let value = self.value()?;
                self.out.statements.push(Statement::Entry { name, value });
                Ok(())
            }
            b'\n' | b';' | 0 => {
                self.out.statements.push(Statement::NoValue(name));
                Ok(())
            }
            c => Err(format!(
                "syntax error, unexpected '{}' after '{name}'",
                c as char
            )),
        }
    }

    /// After `=`: `string_or_value`, up to the end of the line.
    fn value(&mut self) -> Result<String, String> {
        self.i += self.blanks_from(self.i);
        let save = self.i;
        match self.token(Mode::Value)? {
            t @ (Tok::True | Tok::False) => {
                return match self.token(Mode::Value)? {
                    Tok::End if t == Tok::True => Ok("1".into()),
                    Tok::End => Ok(String::new()),
                    _ => Err("syntax error: yes/no/on/off/true/false/none/null must be the whole value (quote it to use it as text)".into()),
                };
            }
            Tok::End => return Ok(String::new()),
            _ => {}
        }
        self.i = save;
        let v = self.expr()?;
        match self.token(Mode::Value)? {
            Tok::End => Ok(v),
            Tok::Equals => Err("syntax error, unexpected '=' in a value (quote the value)".into()),
            Tok::Op(c) => Err(format!("syntax error, unexpected '{}'", c as char)),
            _ => Err("syntax error in the value".into()),
        }
    }

    fn peek_token(&mut self, mode: Mode) -> Result<Tok, String> {
        let save = self.i;
        let t = self.token(mode);
        self.i = save;
        t
    }

    /// `expr`: `|`, `&`, `^` (left-associative, one precedence), `~`, `!`
    /// and parentheses, on integers (`atoi` of each side, as PHP's
    /// `zend_ini_do_op`).
    fn expr(&mut self) -> Result<String, String> {
        let mut lhs = self.unary()?;
        loop {
            match self.peek_token(Mode::Value)? {
                Tok::Op(op @ (b'|' | b'&' | b'^')) => {
                    self.token(Mode::Value)?;
                    let rhs = self.unary()?;
                    let (a, b) = (atoi(&lhs), atoi(&rhs));
                    lhs = match op {
                        b'|' => a | b,
                        b'&' => a & b,
                        _ => a ^ b,
                    }
                    .to_string();
                }
                _ => return Ok(lhs),
            }
        }
    }

    fn unary(&mut self) -> Result<String, String> {
        match self.peek_token(Mode::Value)? {
            Tok::Op(b'~') => {
                self.token(Mode::Value)?;
                Ok((!atoi(&self.unary()?)).to_string())
            }
            Tok::Op(b'!') => {
                self.token(Mode::Value)?;
                Ok(i32::from(atoi(&self.unary()?) == 0).to_string())
            }
            Tok::Op(b'(') => {
                self.token(Mode::Value)?;
                let v = self.expr()?;
                match self.token(Mode::Value)? {
                    Tok::Op(b')') => Ok(v),
                    _ => Err("syntax error: missing ')'".into()),
                }
            }
            _ => self.string_list(Mode::Value),
        }
    }

    /// `var_string_list` (or `…_section`): pieces concatenated, up to the
    /// first token that is not a piece (left unread in a value; `]`
    /// consumed in an offset or a section).
    fn string_list(&mut self, mode: Mode) -> Result<String, String> {
        let mut out = String::new();
        let mut pieces = 0;
        loop {
            let save = self.i;
            match self.token(mode)? {
                Tok::Piece(p) => {
                    out.push_str(&p);
                    pieces += 1;
                }
                Tok::End if mode != Mode::Value => return Ok(out),
                _ if mode != Mode::Value => {
                    return Err(format!(
                        "syntax error: unterminated {}",
                        if mode == Mode::Section {
                            "section name"
                        } else {
                            "'[' key"
                        }
                    ))
                }
                _ => {
                    self.i = save;
                    if pieces == 0 {
                        return Err("syntax error: a value was expected".into());
                    }
                    return Ok(out);
                }
            }
        }
    }

    /// The next token of `mode`, by longest match (ties: the rule written
    /// first in `zend_ini_scanner.l`). Errors: no rule matches here.
    fn token(&mut self, mode: Mode) -> Result<Tok, String> {
        let r = self.rest();
        let c = r.first().copied().unwrap_or(0);
        let mut best = Longest::default();
        self.delimiters(mode, &mut best);
        self.words(&mut best);
        self.runs(mode, &mut best);
        let Some((len, _, kind)) = best.0 else {
            return Err(no_token(c, mode));
        };
        let text = &r[..len];
        self.i += len;
        self.make_token(kind, text)
    }

    /// Rules 1 to 7: a `'…'` string, the `]` that ends a section or an
    /// offset, `${`, and in a value the booleans and the end of the line.
    fn delimiters(&self, mode: Mode, best: &mut Longest) {
        let r = self.rest();
        let c = r.first().copied().unwrap_or(0);
        // 1: '…' raw string (at least one character inside).
        if c == b'\'' {
            if let Some(end) = r[1..].iter().position(|&x| x == b'\'') {
                if end > 0 {
                    best.consider(end + 2, 1, b'r');
                }
            }
        }
        // 2: ']' ends a section (eating blanks after it).
        if mode == Mode::Section && c == b']' {
            best.consider(1 + self.blanks_from(self.i + 1), 2, b']');
        }
        // 3: blanks then ']' end an offset.
        if mode == Mode::Offset {
            let n = self.blanks_from(self.i);
            if r.get(n) == Some(&b']') {
                best.consider(n + 1, 3, b']');
            }
        }
        // 4: ${
        if r.starts_with(b"${") {
            best.consider(2, 4, b'$');
        }
        if mode == Mode::Value {
            // 5, 6: booleans (case-insensitive), with the blanks after them.
            let lower: Vec<u8> = r.iter().take(5).map(u8::to_ascii_lowercase).collect();
            for (w, kind) in [
                (&b"true"[..], b'T'),
                (b"on", b'T'),
                (b"yes", b'T'),
                (b"false", b'F'),
                (b"off", b'F'),
                (b"no", b'F'),
                (b"none", b'F'),
                (b"null", b'F'),
            ] {
                if lower.starts_with(w) {
                    let order = if kind == b'T' { 5 } else { 6 };
                    best.consider(w.len() + self.blanks_from(self.i + w.len()), order, kind);
                }
            }
            // 7: end of the value: blanks then the end of the line.
            let n = self.blanks_from(self.i);
            if matches!(r.get(n), Some(b'\n') | None) {
                best.consider(n + 1, 7, b'E');
            }
        }
    }

    /// Rules 8 and 9: a constant's name, a number.
    fn words(&self, best: &mut Longest) {
        let r = self.rest();
        let c = r.first().copied().unwrap_or(0);
        // 8: a constant's name.
        if c.is_ascii_alphabetic() || c == b'_' {
            let n = r
                .iter()
                .take_while(|x| x.is_ascii_alphanumeric() || **x == b'_')
                .count();
            best.consider(n, 8, b'C');
        }
        // 9: a number: -?[0-9]+ | [0-9]*\.[0-9]+ | [0-9]+\.[0-9]*
        {
            let digits = |from: usize| {
                r[from.min(r.len())..]
                    .iter()
                    .take_while(|x| x.is_ascii_digit())
                    .count()
            };
            let neg = usize::from(c == b'-');
            let lnum = digits(neg);
            if lnum > 0 {
                best.consider(neg + lnum, 9, b'N');
            }
            let int = digits(0);
            if r.get(int) == Some(&b'.') {
                let frac = digits(int + 1);
                if int + frac > 0 {
                    best.consider(int + 1 + frac, 9, b'N');
                }
            }
        }
    }

    /// Rules 10 to 15: in a value the operators and `=`; a run of value
    /// characters, an opening `"`, blanks, and in a value a comment.
    fn runs(&self, mode: Mode, best: &mut Longest) {
        let r = self.rest();
        let c = r.first().copied().unwrap_or(0);
        if mode == Mode::Value {
            // 10: operators, with the blanks after them.
            if matches!(c, b'&' | b'|' | b'^' | b'~' | b'(' | b')' | b'!') {
                best.consider(1 + self.blanks_from(self.i + 1), 10, b'o');
            }
            // 11: '=' ends the value (and the line fails to parse).
            if c == b'=' {
                best.consider(1, 11, b'=');
            }
            // 12: VALUE_CHARS+
            best.consider(self.run_len(Mode::Value), 12, b's');
        } else {
            // 12: SECTION_VALUE_CHARS+
            best.consider(self.run_len(mode), 12, b's');
        }
        // 13: blanks then '"' open a quoted string.
        {
            let n = self.blanks_from(self.i);
            if r.get(n) == Some(&b'"') {
                best.consider(n + 1, 13, b'"');
            }
        }
        // 14: blanks.
        best.consider(self.blanks_from(self.i), 14, b' ');
        // 15: a comment ends the value.
        if mode == Mode::Value {
            let n = self.blanks_from(self.i);
            if r.get(n) == Some(&b';') {
                best.consider(r.len(), 15, b'E');
            }
        }
    }

    /// The token of rule kind `kind` whose text is `text` (already
    /// consumed): a constant's name replaced by its value, a variable or a
    /// quoted string read on. Errors: those of the variable or the string.
    fn make_token(&mut self, kind: u8, text: &[u8]) -> Result<Tok, String> {
        let len = text.len();
        Ok(match kind {
            b'r' => Tok::Piece(string(&text[1..len - 1])),
            b']' | b'E' => Tok::End,
            b'$' => Tok::Piece(self.variable()?),
            b'T' => Tok::True,
            b'F' => Tok::False,
            b'C' => {
                let name = string(text);
                match constant(&name) {
                    Some(v) => {
                        self.out.replaced_constants.push((name, v.to_string()));
                        Tok::Piece(v.to_string())
                    }
                    None => {
                        if name.starts_with("PHP_") || name.starts_with("E_") {
                            self.out.unknown_constants.push(name.clone());
                        }
                        Tok::Piece(name)
                    }
                }
            }
            b'N' | b's' | b' ' => Tok::Piece(string(text)),
            b'o' => Tok::Op(text[0]),
            b'=' => Tok::Equals,
            b'"' => Tok::Piece(self.quoted()?),
            _ => unreachable!("token kinds are the ones above"),
        })
    }

    /// Length of the run of `VALUE_CHARS` (or `SECTION_VALUE_CHARS`) here.
    fn run_len(&self, mode: Mode) -> usize {
        let r = self.rest();
        let mut n = 0;
        while n < r.len() {
            let c = r[n];
            if c == b'$' {
                // LITERAL_DOLLAR: '$' and a character that is not '{'
                // ("$\" takes one more).
                match r.get(n + 1) {
                    Some(b'{') | None | Some(b'\n') => break,
                    Some(b'\\') if r.get(n + 2).is_some_and(|&x| x != b'\n') => n += 3,
                    Some(_) => n += 2,
                }
                continue;
            }
            let ok = match mode {
                Mode::Value => !matches!(
                    c,
                    b'=' | b' '
                        | b'\t'
                        | b'\n'
                        | b'\r'
                        | b';'
                        | b'&'
                        | b'|'
                        | b'^'
                        | b'~'
                        | b'('
                        | b')'
                        | b'!'
                        | b'"'
                        | b'\''
                        | 0
                ),
                _ => {
                    if c == b'\\' && r.get(n + 1).is_some_and(|&x| x != b'\n') {
                        n += 2;
                        continue;
                    }
                    !matches!(c, b'\n' | b'\r' | b';' | b'"' | b'\'' | b']' | b'\\')
                }
            };
            if !ok {
                break;
            }
            n += 1;
        }
        n
    }

    /// After `${`: the variable's name up to `}`, its value from the
    /// environment (empty when unset). `${NAME:-default}` gives `default`
    /// when NAME is unset (PHP 8.3's syntax; PHP 8.2 reads a variable
    /// named `NAME:-default`).
    fn variable(&mut self) -> Result<String, String> {
        let r = self.rest();
        let len = r
            .iter()
            .take_while(|&&c| c != b'}' && label_char(c))
            .count();
        if r.get(len) != Some(&b'}') {
            return Err("syntax error: unterminated ${…} (missing '}')".into());
        }
        let name = string(trim_blanks(&r[..len]));
        self.i += len + 1;
        if name.is_empty() {
            return Err("syntax error: empty ${}".into());
        }
        Ok(match name.split_once(":-") {
            Some((var, default)) => {
                (self.getenv)(var.trim()).unwrap_or_else(|| default.to_string())
            }
            None => (self.getenv)(&name).unwrap_or_default(),
        })
    }

    /// After `"`: the string up to its closing `"` (which eats the blanks
    /// after it), `${VAR}` expanded, escapes as `zend_ini_escape_string`.
    fn quoted(&mut self) -> Result<String, String> {
        let mut out = String::new();
        loop {
            let r = self.rest();
            if r.first() == Some(&b'"') {
                self.i += 1 + self.blanks_from(self.i + 1);
                return Ok(out);
            }
            if r.starts_with(b"${") {
                self.i += 2;
                out.push_str(&self.variable()?);
                continue;
            }
            if r.is_empty() || r == b"\n" {
                return Err("syntax error: unterminated \"…\" string".into());
            }
            // Contents up to '"' or "${" (a '\"' at the end of the line is
            // a backslash and the closing quote, as PHP's special case for
            // Windows paths).
            let mut n = 0;
            while n < r.len() {
                match r[n] {
                    b'"' => break,
                    b'$' if r.get(n + 1) == Some(&b'{') => break,
                    b'\\' if n + 1 < r.len() => {
                        if r[n + 1] == b'"' && matches!(r.get(n + 2), None | Some(b'\n' | b'\r')) {
                            n += 1;
                            break;
                        }
                        n += 2;
                    }
                    _ => n += 1,
                }
            }
            let raw = &r[..n];
            self.i += n;
            let mut piece = Vec::with_capacity(raw.len());
            let mut k = 0;
            while k < raw.len() {
                if raw[k] == b'\\' && k + 1 < raw.len() && matches!(raw[k + 1], b'"' | b'\\' | b'$')
                {
                    piece.push(raw[k + 1]);
                    k += 2;
                } else {
                    piece.push(raw[k]);
                    k += 1;
                }
            }
            if piece.last() == Some(&b'\n') {
                piece.pop();
            }
            out.push_str(&string(&piece));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOME" => Some("/home/u".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    fn one(line: &str) -> Statement {
        let mut s = scan_line(line, &env).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        assert_eq!(s.statements.len(), 1, "{line:?}: {s:?}");
        s.statements.remove(0)
    }

    fn value(line: &str) -> String {
        match one(line) {
            Statement::Entry { value, .. } | Statement::Array { value, .. } => value,
            s => panic!("{line:?}: {s:?}"),
        }
    }

    fn entry(name: &str, value: &str) -> Statement {
        Statement::Entry {
            name: name.into(),
            value: value.into(),
        }
    }

    /// INDEX.md quirk 1: `;` starts a comment anywhere outside quotes;
    /// unquoted values are trimmed.
    #[test]
    fn quirk_1_comments_and_trimming() {
        assert_eq!(
            one("pm.process_idle_timeout = 10s;"),
            entry("pm.process_idle_timeout", "10s")
        );
        assert_eq!(value("a = b ; comment"), "b");
        assert_eq!(value("a =   padded value   "), "padded value");
        assert_eq!(value("a = \"x ; y\""), "x ; y");
        assert_eq!(value("a = 'x ; y'"), "x ; y");
        assert!(scan_line("; a comment", &env)
            .unwrap()
            .statements
            .is_empty());
        assert!(scan_line("   ", &env).unwrap().statements.is_empty());
        assert!(scan_line("", &env).unwrap().statements.is_empty());
        // '#' is no comment (PHP >= 7): the text is part of the value.
        assert_eq!(value("pm.status_path = /fpm_status #x"), "/fpm_status #x");
    }

    /// Quirk 1: quoted strings, raw strings, concatenation.
    #[test]
    fn quirk_1_quotes_and_concatenation() {
        assert_eq!(
            value(r#"access.format = "%R - %u %t \"%m %r%Q%q\" %s %f %{mili}d %{kilo}M %C%%""#),
            r#"%R - %u %t "%m %r%Q%q" %s %f %{mili}d %{kilo}M %C%%"#
        );
        assert_eq!(value(r"a = 'raw \n $x \\'"), r"raw \n $x \\");
        assert_eq!(value(r#"a = "a\\b\$c\nd""#), r"a\b$c\nd");
        assert_eq!(value(r#"a = "a"b"#), "ab");
        // A quoted piece eats the blanks around it (corpus 08's old
        // unquoted access.format).
        assert_eq!(
            value(r#"access.format = %R - %u %t "%m %r" %s"#),
            "%R - %u %t%m %r%s"
        );
        assert_eq!(value(r#"a = "C:\path\""#), r"C:\path\");
        assert_eq!(value(r#"a = """#), "");
        assert_eq!(value("a = \"${HOME}/x\""), "/home/u/x");
        assert!(scan_line("a = 'unterminated", &env).is_err());
        assert!(scan_line("a = \"unterminated", &env).is_err());
        assert!(
            scan_line("a = ''", &env).is_err(),
            "PHP's raw string needs a character"
        );
    }

    /// Quirk 1: an unquoted '=' in a value is a syntax error.
    #[test]
    fn quirk_1_equals_in_a_value() {
        let e = scan_line(
            "php_admin_value[sendmail_path] = /usr/sbin/sendmail -f a=b",
            &env,
        )
        .unwrap_err();
        assert!(e.contains("'='"), "{e}");
        assert_eq!(value("a = \"x=y\""), "x=y");
    }

    /// Quirk 1: constants and operators in values and unquoted keys.
    #[test]
    fn quirk_1_constants() {
        assert_eq!(
            value("php_value[error_reporting] = E_ALL & ~E_DEPRECATED & ~E_STRICT"),
            "22527"
        );
        assert_eq!(
            value("a = E_ALL & ~E_NOTICE & ~E_DEPRECATED & ~E_STRICT"),
            "22519"
        );
        assert_eq!(value("a = E_ERROR | E_WARNING"), "3");
        assert_eq!(value("a = (E_ALL ^ E_NOTICE)"), "32759");
        assert_eq!(value("a = !0"), "1");
        assert_eq!(value("a = E_ALL"), "32767");
        assert_eq!(value("a = dynamic"), "dynamic");
        match one("env[LC_ALL] = $LANG") {
            Statement::Array { key, value, .. } => {
                assert_eq!(key, "6");
                assert_eq!(value, "$LANG");
            }
            s => panic!("{s:?}"),
        }
        match one("env['LC_ALL'] = C") {
            Statement::Array { key, .. } => assert_eq!(key, "LC_ALL"),
            s => panic!("{s:?}"),
        }
        match one("env[\"LC_ALL\"] = C") {
            Statement::Array { key, .. } => assert_eq!(key, "LC_ALL"),
            s => panic!("{s:?}"),
        }
        let s = scan_line("env[PHP_VERSION] = x", &env).unwrap();
        assert_eq!(s.unknown_constants, ["PHP_VERSION"]);
        let s = scan_line("env[LC_ALL] = x", &env).unwrap();
        assert_eq!(
            s.replaced_constants,
            [("LC_ALL".to_string(), "6".to_string())]
        );
        // Not constants: longer runs.
        assert_eq!(value("listen = 127.0.0.1:9000"), "127.0.0.1:9000");
        assert_eq!(
            value("a = /run/php/php8.2-fpm.sock"),
            "/run/php/php8.2-fpm.sock"
        );
    }

    /// Quirk 1 and 13: `${VAR}` in values and in section names.
    #[test]
    fn env_variables() {
        assert_eq!(value("a = ${HOME}"), "/home/u");
        assert_eq!(value("a = ${HOME}/bin"), "/home/u/bin");
        assert_eq!(value("a = ${UNSET}"), "");
        assert_eq!(value("a = ${UNSET:-fallback}"), "fallback");
        assert_eq!(value("a = ${HOME:-fallback}"), "/home/u");
        assert_eq!(value("a = ${EMPTY:-fallback}"), "");
        assert_eq!(one("[${HOME}]"), Statement::Section("/home/u".into()));
        assert_eq!(
            one("[site_${UNSET:-a}]"),
            Statement::Section("site_a".into())
        );
        // $NAME without braces is literal (php-fpm expands env[] values later).
        assert_eq!(value("env[PATH] = $PATH"), "$PATH");
        assert!(scan_line("a = ${HOME", &env).is_err());
    }

    /// Quirk 2: booleans.
    #[test]
    fn quirk_2_booleans() {
        for t in ["yes", "on", "true", "On", "YES", "True", "yes  "] {
            assert_eq!(value(&format!("a = {t}")), "1", "{t}");
        }
        for f in ["no", "off", "false", "none", "null", "Off", "NO", ""] {
            assert_eq!(value(&format!("a = {f}")), "", "{f}");
        }
        assert_eq!(value("a = 1"), "1");
        assert_eq!(value("a = yesterday"), "yesterday");
        assert_eq!(value("a = no-cache"), "no-cache");
        assert_eq!(value("a = \"yes\""), "yes");
        assert!(scan_line("a = yes please", &env).is_err());
    }

    /// Quirks 3-5: numbers, times and sizes stay text here.
    #[test]
    fn quirks_3_to_5_numbers_stay_text() {
        assert_eq!(value("a = 1d"), "1d");
        assert_eq!(value("a = 0660"), "0660");
        assert_eq!(value("a = -1"), "-1");
        assert_eq!(value("a = 128M"), "128M");
        assert_eq!(value("a = 0.5"), "0.5");
    }

    /// Quirk 8: sections.
    #[test]
    fn quirk_8_sections() {
        assert_eq!(one("[www]"), Statement::Section("www".into()));
        assert_eq!(
            one("[example.org]"),
            Statement::Section("example.org".into())
        );
        assert_eq!(one("[global] ; c"), Statement::Section("global".into()));
        assert_eq!(one("[www]   "), Statement::Section("www".into()));
        assert!(scan_line("[www", &env).is_err());
    }

    /// Quirk 10: layout.
    #[test]
    fn quirk_10_layout() {
        assert_eq!(
            one("include=/etc/php-fpm.d/*.conf"),
            entry("include", "/etc/php-fpm.d/*.conf")
        );
        assert_eq!(
            one("php_value[session.save_path]    = /var/lib/php/session"),
            Statement::Array {
                name: "php_value".into(),
                key: "session.save_path".into(),
                value: "/var/lib/php/session".into()
            }
        );
        assert_eq!(
            one("php_value[x]=1"),
            Statement::Array {
                name: "php_value".into(),
                key: "x".into(),
                value: "1".into()
            }
        );
        assert_eq!(one("user\t=\twww-data"), entry("user", "www-data"));
        assert_eq!(one("key = "), entry("key", ""));
        assert_eq!(one("\tpm = static"), entry("pm", "static"));
        assert_eq!(one("lonely"), Statement::NoValue("lonely".into()));
        assert_eq!(
            one("access.suppress_path[] = /ping"),
            Statement::Array {
                name: "access.suppress_path".into(),
                key: String::new(),
                value: "/ping".into()
            }
        );
        // Blanks after '[' are eaten; blanks before ']' belong to the key
        // (SECTION_VALUE_CHARS includes ' ' and beats the constant rule).
        assert_eq!(
            one("php_admin_value[ sendmail_path ] = \"/usr/sbin/sendmail -t -i -f www@example.org\""),
            Statement::Array {
                name: "php_admin_value".into(),
                key: "sendmail_path ".into(),
                value: "/usr/sbin/sendmail -t -i -f www@example.org".into()
            }
        );
    }

    /// Quirk 11: lists stay text (split by the directive).
    #[test]
    fn quirk_11_lists() {
        assert_eq!(value("listen.acl_users = apache,nginx"), "apache,nginx");
        assert_eq!(
            value("security.limit_extensions = .php .php3 .php4"),
            ".php .php3 .php4"
        );
        assert_eq!(
            value("php_admin_value[open_basedir] = /srv/a:/tmp:/usr/share/php"),
            "/srv/a:/tmp:/usr/share/php"
        );
    }

    #[test]
    fn atoi_as_c() {
        assert_eq!(atoi("32767 "), 32767);
        assert_eq!(atoi(" -3x"), -3);
        assert_eq!(atoi("abc"), 0);
    }
}
