//! `fpmd status`: the control socket's status document read back, drawn
//! as one frame of text per sample, and the terminal view that redraws it
//! every interval until `q`, Esc or Ctrl-C (as top does).
//!
//! Owns: how the view looks, and the terminal while it runs (raw mode and
//! the alternate screen, put back on every way out, a panic included).
//! Must not touch: the daemon (it only asks over the control socket, see
//! [`crate::control::socket`]; the document is [`super::board`]'s).

use std::io::{self, IsTerminal, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::control::socket::{self, Answer, Request};

/// How long one status request may take before the view says so.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Why there is no status to show.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// Nobody answers on the control socket (fpmd is not running, or runs
    /// with another `control_socket`), or it did not answer in time.
    #[error("{0}; is fpmd running with this configuration?")]
    Unreachable(io::Error),
    /// The daemon refused the request (an unknown pool: the message names
    /// the known ones).
    #[error("{0}")]
    Refused(String),
    /// The answer is no status document (an fpmd older than this client).
    #[error("fpmd answered something that is no status document ({reason}): {text}")]
    Garbled { reason: String, text: String },
    /// Stdout or the terminal failed.
    #[error("cannot write the status: {0}")]
    Output(io::Error),
}

/// Writes `text` to stdout. A reader that went away (`fpmd status | head`)
/// is no error.
pub fn print(text: &str) -> Result<(), StatusError> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(StatusError::Output(e)),
        _ => Ok(()),
    }
}

/// The daemon's own facts (the document's `fpmd` object).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct DaemonView {
    pub pid: u32,
    pub version: String,
    pub phase: String,
    #[serde(rename = "start since")]
    pub start_since: u64,
    pub config: String,
}

/// One pool: php-fpm's status fields, plus fpmd's.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct PoolView {
    pub pool: String,
    #[serde(rename = "process manager")]
    pub process_manager: String,
    #[serde(rename = "start since")]
    pub start_since: u64,
    #[serde(rename = "accepted conn")]
    pub accepted_conn: u64,
    #[serde(rename = "listen queue")]
    pub listen_queue: u64,
    #[serde(rename = "max listen queue")]
    pub max_listen_queue: u64,
    #[serde(rename = "listen queue len")]
    pub listen_queue_len: u64,
    #[serde(rename = "idle processes")]
    pub idle_processes: u64,
    #[serde(rename = "active processes")]
    pub active_processes: u64,
    #[serde(rename = "total processes")]
    pub total_processes: u64,
    #[serde(rename = "max active processes")]
    pub max_active_processes: u64,
    #[serde(rename = "max children reached")]
    pub max_children_reached: u64,
    #[serde(rename = "slow requests")]
    pub slow_requests: u64,
    /// The current generation (fpmd's).
    pub generation: u32,
    /// `pm.max_children` (fpmd's).
    #[serde(rename = "max children")]
    pub max_children: u32,
    pub processes: Vec<ProcessView>,
}

/// One child (php-fpm's `&full` row, plus fpmd's `generation`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ProcessView {
    pub pid: i64,
    pub state: String,
    pub requests: u64,
    /// The running request's time so far, or the last one's (µs).
    #[serde(rename = "request duration")]
    pub request_duration: u64,
    #[serde(rename = "request method", deserialize_with = "shown")]
    pub request_method: String,
    #[serde(rename = "request uri", deserialize_with = "shown")]
    pub request_uri: String,
    #[serde(deserialize_with = "shown")]
    pub script: String,
    pub generation: u32,
}

/// Client-supplied text as the terminal may show it: control characters
/// (and invalid UTF-8) escaped as in fpmd's log, so that a URI cannot move
/// the cursor, colour the view or split a row.
fn shown<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = <String as serde::Deserialize>::deserialize(d)?;
    Ok(crate::log::escape_controls(s.as_bytes()).to_string())
}

/// The whole status document.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Document {
    pub fpmd: DaemonView,
    pub pools: Vec<PoolView>,
}

/// Asks the daemon at `socket` for `request` (a `status`); returns its
/// JSON text as it came, once it is known to be a status document.
pub fn fetch_raw(socket: &Path, request: &Request) -> Result<String, StatusError> {
    fetch_both(socket, request).map(|(text, _)| text)
}

/// [`fetch_raw`], read into a [`Document`].
pub fn fetch(socket: &Path, request: &Request) -> Result<Document, StatusError> {
    fetch_both(socket, request).map(|(_, doc)| doc)
}

fn fetch_both(socket: &Path, request: &Request) -> Result<(String, Document), StatusError> {
    let text = match socket::call_within(socket, request, Some(ANSWER_TIMEOUT)) {
        Ok(Answer::Ok(text)) => text,
        Ok(Answer::Error(e) | Answer::ConfigError(e)) => return Err(StatusError::Refused(e)),
        Err(e) => return Err(StatusError::Unreachable(e)),
    };
    let garbled = |reason: String, text: String| StatusError::Garbled { reason, text };
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| garbled(e.to_string(), text.clone()))?;
    if value.get("pools").is_none() || value.get("fpmd").is_none() {
        return Err(garbled("no \"fpmd\" or \"pools\"".into(), text));
    }
    let doc = Document::deserialize(&value).map_err(|e| garbled(e.to_string(), text.clone()))?;
    Ok((text, doc))
}

/// What a line of a frame is, for its style on a terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Title,
    /// A problem with the last sample (the daemon is gone, …).
    Alert,
    Pool,
    Summary,
    Header,
    Running,
    Idle,
    Blank,
}

/// One line of a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub kind: Kind,
    pub text: String,
}

fn line(kind: Kind, text: impl Into<String>) -> Line {
    Line {
        kind,
        text: text.into(),
    }
}

/// `us` µs as the view shows a request's duration: 850us, 12.3ms, 2.51s,
/// 3m05s, 2h07m.
pub fn duration(us: u64) -> String {
    match us {
        0..=999 => format!("{us}us"),
        1_000..=999_999 => format!("{:.1}ms", us as f64 / 1e3),
        1_000_000..=59_999_999 => format!("{:.2}s", us as f64 / 1e6),
        _ => {
            let s = us / 1_000_000;
            if s < 3600 {
                format!("{}m{:02}s", s / 60, s % 60)
            } else {
                format!("{}h{:02}m", s / 3600, s % 3600 / 60)
            }
        }
    }
}

/// Seconds since a start, as the view shows it: 45s, 3m12s, 1h02m, 2d03h.
pub fn uptime(s: u64) -> String {
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() {
        "-"
    } else {
        s
    }
}

/// `s` cut to `width` characters, its last one then `~`.
fn fit(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(width - 1).collect();
    out.push('~');
    out
}

/// The columns before URI and SCRIPT: name, width, right-aligned.
const COLUMNS: [(&str, usize, bool); 6] = [
    ("PID", 7, true),
    ("GEN", 3, true),
    ("STATE", 7, false),
    ("REQS", 6, true),
    ("DURATION", 8, true),
    ("METHOD", 7, false),
];

/// The widths of the URI and SCRIPT columns within `width` (the whole
/// line), the longest values being `uri` and `script` long.
fn uri_script_widths(width: usize, uri: usize, script: usize) -> (usize, usize) {
    let fixed: usize = COLUMNS.iter().map(|(_, w, _)| w + 1).sum();
    let uri = uri.max(3);
    let script = script.max(6);
    let room = width.saturating_sub(fixed + 1);
    if uri + script <= room {
        return (uri, script);
    }
    // The URI tells most about a request: it gets two thirds of the room
    // when both do not fit.
    let u = uri.min(room.saturating_sub(script).max(room * 2 / 3));
    (u, room.saturating_sub(u))
}

/// One frame of the view for `doc`, at most `width` characters a line
/// (`usize::MAX`: no limit). `clock` is the time of the sample, `hint`
/// what the title says last (the keys, on a terminal); `alert` a problem
/// with the sample (then `doc` is the last good one, if any).
pub fn frame(
    doc: Option<&Document>,
    width: usize,
    clock: &str,
    hint: &str,
    alert: Option<&str>,
) -> Vec<Line> {
    let mut out = Vec::new();
    out.push(line(Kind::Title, title(doc, clock, hint)));
    if let Some(a) = alert {
        out.push(line(Kind::Alert, a));
    }
    let Some(doc) = doc else {
        return cut(out, width);
    };
    for p in &doc.pools {
        out.push(line(Kind::Blank, ""));
        pool_summary(p, &mut out);
        children(p, width, &mut out);
    }
    cut(out, width)
}

/// The title line: the daemon's version, pid, phase, uptime and pools
/// when there is a sample, then `clock` and `hint`.
fn title(doc: Option<&Document>, clock: &str, hint: &str) -> String {
    match doc {
        Some(d) => {
            let f = &d.fpmd;
            let pools = d.pools.len();
            let s = if pools == 1 { "" } else { "s" };
            format!(
                "fpmd {} - pid {} - {} - up {} - {pools} pool{s} - {clock}{hint}",
                f.version,
                f.pid,
                f.phase,
                uptime(f.start_since)
            )
        }
        None => format!("fpmd - {clock}{hint}"),
    }
}

/// The three lines that sum a pool up.
fn pool_summary(p: &PoolView, out: &mut Vec<Line>) {
    // Three short lines rather than one long: an 80-column terminal
    // shows them whole.
    out.push(line(
        Kind::Pool,
        format!(
            "pool {}  {}  generation {}  up {}  accepted conn {}  slow requests {}",
            p.pool,
            p.process_manager,
            p.generation,
            uptime(p.start_since),
            p.accepted_conn,
            p.slow_requests
        ),
    ));
    out.push(line(
        Kind::Summary,
        format!(
            "  listen queue {}/{} (max {})  max children reached {}",
            p.listen_queue, p.listen_queue_len, p.max_listen_queue, p.max_children_reached
        ),
    ));
    out.push(line(
        Kind::Summary,
        format!(
            "  processes {} idle, {} active, {} total (max active {}, max children {})",
            p.idle_processes,
            p.active_processes,
            p.total_processes,
            p.max_active_processes,
            p.max_children
        ),
    ));
}

/// The table of a pool's children: the header, then one row each (or
/// "(no child)"); the URI and script columns share what `width` leaves.
fn children(p: &PoolView, width: usize, out: &mut Vec<Line>) {
    let longest = |f: fn(&ProcessView) -> &str| {
        p.processes
            .iter()
            .map(|c| or_dash(f(c)).chars().count())
            .max()
            .unwrap_or(0)
    };
    let (uw, sw) = uri_script_widths(width, longest(|c| &c.request_uri), longest(|c| &c.script));
    let mut header = String::new();
    for (name, w, right) in COLUMNS {
        header.push_str(&cell(name, w, right));
        header.push(' ');
    }
    header.push_str(&format!("{:<uw$} {}", "URI", "SCRIPT"));
    out.push(line(Kind::Header, header.trim_end()));
    if p.processes.is_empty() {
        out.push(line(Kind::Idle, "  (no child)"));
    }
    for c in &p.processes {
        out.push(child_row(c, uw, sw));
    }
}

/// One child's row, its URI and script cut to `uw` and `sw` characters.
fn child_row(c: &ProcessView, uw: usize, sw: usize) -> Line {
    let pid = if c.pid > 0 {
        c.pid.to_string()
    } else {
        "-".into()
    };
    let values = [
        pid,
        c.generation.to_string(),
        c.state.clone(),
        c.requests.to_string(),
        duration(c.request_duration),
        or_dash(&c.request_method).to_string(),
    ];
    let mut row = String::new();
    for ((_, w, right), v) in COLUMNS.iter().zip(&values) {
        row.push_str(&cell(v, *w, *right));
        row.push(' ');
    }
    row.push_str(&format!(
        "{:<uw$} {}",
        fit(or_dash(&c.request_uri), uw),
        fit(or_dash(&c.script), sw)
    ));
    let kind = if c.state == "Running" {
        Kind::Running
    } else {
        Kind::Idle
    };
    line(kind, row.trim_end())
}

/// `v` in a column of `w` characters.
fn cell(v: &str, w: usize, right: bool) -> String {
    let v = fit(v, w);
    if right {
        format!("{v:>w$}")
    } else {
        format!("{v:<w$}")
    }
}

fn cut(lines: Vec<Line>, width: usize) -> Vec<Line> {
    lines
        .into_iter()
        .map(|l| Line {
            text: fit(&l.text, width),
            ..l
        })
        .collect()
}

/// The local time of day, for the title.
fn clock() -> String {
    chrono::Local::now().format("%H:%M:%S").to_string()
}

/// `fpmd status` without `--json`: asks once (an error then ends it before
/// the terminal is touched), then either prints one frame (`once`, or
/// stdout is no terminal) or runs the view until `q`, Esc or Ctrl-C,
/// asking every `interval`.
pub fn run(
    socket: &Path,
    request: &Request,
    interval: Duration,
    once: bool,
) -> Result<(), StatusError> {
    let first = fetch(socket, request)?;
    let terminal = io::stdout().is_terminal();
    if once || !terminal {
        // On a terminal, as wide as it is; else whole lines.
        let width = match crossterm::terminal::size() {
            Ok((cols, _)) if terminal => cols.max(1) as usize,
            _ => usize::MAX,
        };
        let mut text = String::new();
        for l in frame(Some(&first), width, &clock(), "", None) {
            text.push_str(&l.text);
            text.push('\n');
        }
        return print(&text);
    }
    let fetch_again = || fetch(socket, request);
    view(first, fetch_again, interval).map_err(StatusError::Output)
}

/// Raw mode and the alternate screen while it lives; the terminal as it
/// was once dropped (on return, error or panic alike).
struct Screen;

impl Screen {
    fn enter() -> io::Result<Screen> {
        crossterm::terminal::enable_raw_mode()?;
        let screen = Screen;
        crossterm::execute!(
            io::stdout(),
            crossterm::terminal::EnterAlternateScreen,
            crossterm::cursor::Hide
        )?;
        Ok(screen)
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = crossterm::execute!(
            io::stdout(),
            crossterm::style::ResetColor,
            crossterm::cursor::Show,
            crossterm::terminal::LeaveAlternateScreen
        );
        let _ = crossterm::terminal::disable_raw_mode();
    }
}

/// The view's loop: draws, then waits for a key until the next sample.
/// SIGTERM, SIGHUP and SIGINT end it as `q` does (Ctrl-C is a key in raw
/// mode).
fn view(
    first: Document,
    mut fetch: impl FnMut() -> Result<Document, StatusError>,
    interval: Duration,
) -> io::Result<()> {
    use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGINT,
    ] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    let _screen = Screen::enter()?;
    let mut out = io::BufWriter::new(io::stdout());
    let mut last = Some(first);
    let mut alert: Option<String> = None;
    let mut taken = clock();
    let hint = "   (q: quit)";
    draw(&mut out, last.as_ref(), &taken, hint, alert.as_deref())?;
    let mut next = Instant::now() + interval;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= next {
            match fetch() {
                Ok(d) => {
                    last = Some(d);
                    alert = None;
                }
                Err(e) => {
                    alert = Some(format!(
                        "{e}; asking again every {}",
                        duration(interval.as_micros() as u64)
                    ))
                }
            }
            taken = clock();
            draw(&mut out, last.as_ref(), &taken, hint, alert.as_deref())?;
            next = Instant::now() + interval;
            continue;
        }
        // Short waits: a signal is seen soon.
        let wait = (next - now).min(Duration::from_millis(250));
        if !event::poll(wait)? {
            continue;
        }
        match event::read()? {
            Event::Key(k) if k.kind != KeyEventKind::Release => match k.code {
                KeyCode::Char('q') | KeyCode::Char('Q') | KeyCode::Esc => break,
                KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => break,
                _ => {}
            },
            Event::Resize(..) => draw(&mut out, last.as_ref(), &taken, hint, alert.as_deref())?,
            _ => {}
        }
    }
    Ok(())
}

/// Draws one frame over the whole screen; what does not fit in its height
/// is left out, and the last row says how much.
fn draw(
    out: &mut impl Write,
    doc: Option<&Document>,
    clock: &str,
    hint: &str,
    alert: Option<&str>,
) -> io::Result<()> {
    use crossterm::style::{Attribute, Color, Print, SetAttribute, SetForegroundColor};
    use crossterm::{cursor::MoveTo, queue, terminal};
    let (cols, rows) = terminal::size()?;
    let (width, height) = (cols.max(1) as usize, rows.max(1) as usize);
    let mut lines = frame(doc, width, clock, hint, alert);
    if lines.len() > height {
        let more = lines.len() - (height - 1);
        lines.truncate(height - 1);
        lines.push(line(
            Kind::Alert,
            fit(
                &format!("... {more} more lines: make the terminal taller, or ask for one pool"),
                width,
            ),
        ));
    }
    for (row, l) in lines.iter().enumerate() {
        queue!(out, MoveTo(0, row as u16))?;
        match l.kind {
            Kind::Title | Kind::Header => queue!(out, SetAttribute(Attribute::Reverse))?,
            Kind::Pool => queue!(out, SetAttribute(Attribute::Bold))?,
            Kind::Alert => queue!(out, SetForegroundColor(Color::Red))?,
            Kind::Running => queue!(out, SetForegroundColor(Color::Yellow))?,
            Kind::Summary | Kind::Idle | Kind::Blank => {}
        }
        // Title and header span the whole width, as top's.
        let text = match l.kind {
            Kind::Title | Kind::Header => format!("{:<width$}", l.text),
            _ => l.text.clone(),
        };
        queue!(
            out,
            Print(text),
            SetAttribute(Attribute::Reset),
            terminal::Clear(terminal::ClearType::UntilNewLine)
        )?;
    }
    if lines.len() < height {
        queue!(
            out,
            MoveTo(0, lines.len() as u16),
            terminal::Clear(terminal::ClearType::FromCursorDown)
        )?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Document {
        let text = r#"{"fpmd":{"pid":4242,"version":"0.1.0","phase":"ready","start time":1,"start since":3725,"config":"/etc/fpmd/fpmd.toml"},
        "pools":[{"pool":"www","process manager":"static","start time":1,"start since":65,"accepted conn":12,
          "listen queue":1,"max listen queue":3,"listen queue len":511,"idle processes":1,"active processes":1,
          "total processes":2,"max active processes":2,"max children reached":0,"slow requests":5,
          "processes":[
            {"pid":101,"state":"Running","start time":1,"start since":9,"requests":3,"request duration":2510000,
             "request method":"GET","request uri":"/sleep.php?ms=3000&x=abc","content length":0,"user":"-",
             "script":"/srv/www/sleep.php","last request cpu":0.0,"last request memory":0,"generation":2},
            {"pid":0,"state":"Idle","start time":1,"start since":9,"requests":0,"request duration":0,
             "request method":"-","request uri":"-","content length":0,"user":"-","script":"-",
             "last request cpu":0.0,"last request memory":0,"generation":2}],
          "generation":2,"max children":2},
          {"pool":"api","process manager":"ondemand","processes":[],"generation":1,"max children":8}]}"#;
        serde_json::from_str(text).unwrap()
    }

    fn texts(lines: &[Line]) -> Vec<&str> {
        lines.iter().map(|l| l.text.as_str()).collect()
    }

    #[test]
    fn durations_and_uptimes_read_as_top_would() {
        assert_eq!(duration(850), "850us");
        assert_eq!(duration(12_340), "12.3ms");
        assert_eq!(duration(2_510_000), "2.51s");
        assert_eq!(duration(185_000_000), "3m05s");
        assert_eq!(duration(7_620_000_000), "2h07m");
        assert_eq!(uptime(45), "45s");
        assert_eq!(uptime(3725), "1h02m");
        assert_eq!(uptime(2 * 86_400 + 3 * 3600), "2d03h");
    }

    #[test]
    fn a_frame_shows_every_pool_and_child() {
        let f = frame(Some(&doc()), usize::MAX, "12:00:00", "", None);
        let t = texts(&f);
        assert_eq!(
            t[0],
            "fpmd 0.1.0 - pid 4242 - ready - up 1h02m - 2 pools - 12:00:00"
        );
        let www = t.iter().position(|l| l.starts_with("pool www")).unwrap();
        assert_eq!(
            t[www..www + 3],
            [
                "pool www  static  generation 2  up 1m05s  accepted conn 12  slow requests 5",
                "  listen queue 1/511 (max 3)  max children reached 0",
                "  processes 1 idle, 1 active, 2 total (max active 2, max children 2)",
            ]
        );
        let running = f.iter().find(|l| l.kind == Kind::Running).unwrap();
        assert_eq!(
            running.text,
            "    101   2 Running      3    2.51s GET     /sleep.php?ms=3000&x=abc /srv/www/sleep.php"
        );
        let idle = f.iter().find(|l| l.kind == Kind::Idle).unwrap();
        assert!(
            idle.text
                .starts_with("      -   2 Idle         0      0us -       -"),
            "{idle:?}"
        );
        assert!(
            t.iter().any(|l| l.starts_with("pool api  ondemand")),
            "{t:#?}"
        );
        assert!(t.contains(&"  (no child)"), "{t:#?}");
        let header = f.iter().find(|l| l.kind == Kind::Header).unwrap();
        assert!(
            header
                .text
                .starts_with("    PID GEN STATE     REQS DURATION METHOD  URI"),
            "{header:?}"
        );
    }

    #[test]
    fn client_text_is_shown_escaped() {
        let text = r#"{"fpmd":{},"pools":[{"pool":"www","processes":[
            {"pid":1,"state":"Running","request method":"GET","request uri":"/x\u001b[31mred\n\"y","script":"/s\r.php"}]}]}"#;
        let d: Document = serde_json::from_str(text).unwrap();
        let p = &d.pools[0].processes[0];
        assert!(
            !p.request_uri.chars().any(|c| c.is_control()),
            "{:?}",
            p.request_uri
        );
        assert!(!p.script.chars().any(|c| c.is_control()), "{:?}", p.script);
        assert!(p.request_uri.starts_with("/x"), "{:?}", p.request_uri);
    }

    #[test]
    fn a_narrow_frame_cuts_lines_and_keeps_the_uri_first() {
        let f = frame(Some(&doc()), 80, "12:00:00", "", Some("gone"));
        assert!(f.iter().all(|l| l.text.chars().count() <= 80), "{f:#?}");
        assert_eq!(f[1], line(Kind::Alert, "gone"));
        let running = f.iter().find(|l| l.kind == Kind::Running).unwrap();
        assert!(
            running.text.contains(" /sleep.php?ms=3000&x=a"),
            "{running:?}"
        );
        assert!(running.text.ends_with('~'), "{running:?}");
        let (u, s) = uri_script_widths(80, 200, 200);
        assert_eq!((u, s), (23, 12), "two thirds of the 35 columns left");
        assert_eq!(uri_script_widths(300, 10, 20), (10, 20));
    }

    #[test]
    fn no_document_is_a_title_and_the_alert() {
        let f = frame(
            None,
            100,
            "12:00:00",
            " (q: quit)",
            Some("cannot reach fpmd"),
        );
        assert_eq!(
            texts(&f),
            ["fpmd - 12:00:00 (q: quit)", "cannot reach fpmd"]
        );
    }

    #[test]
    fn an_absent_daemon_is_unreachable_and_an_old_one_garbled() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl.sock");
        let status = Request::Status { pool: None };
        let e = fetch(&path, &status).unwrap_err();
        assert!(matches!(e, StatusError::Unreachable(_)), "{e}");
        assert!(e.to_string().contains("is fpmd running"), "{e}");
        // An fpmd from before the status document answered text.
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let old = std::thread::spawn(move || {
            use std::io::{BufRead, BufReader};
            for answer in [
                "ok\npool www: generation 1, 0 busy, 4 idle, 0 waiting\n",
                "error\nno pool named 'x'; the pools are: www\n",
            ] {
                let (s, _) = l.accept().unwrap();
                let mut request = String::new();
                BufReader::new(&s).read_line(&mut request).unwrap();
                (&s).write_all(answer.as_bytes()).unwrap();
            }
        });
        let e = fetch_raw(&path, &status).unwrap_err();
        assert!(matches!(e, StatusError::Garbled { .. }), "{e}");
        assert!(e.to_string().contains("pool www: generation 1"), "{e}");
        let e = fetch(
            &path,
            &Request::Status {
                pool: Some("x".into()),
            },
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "no pool named 'x'; the pools are: www");
        old.join().unwrap();
    }
}
