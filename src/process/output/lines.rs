//! A child's text cut into log lines ([`Lines`]: at newlines and
//! php-fpm's flush marker, at the caller's most bytes per line, never
//! inside a UTF-8 character) and the rate limit of what is logged
//! ([`TokenBucket`] at [`CHILD_RATE`]).

use std::time::{Duration, Instant};

/// php-fpm's flush marker (`FPM_STDIO_CMD_FLUSH` with its NUL, 6 bytes):
/// its child writes it to stderr after each request, and its master ends
/// the child's unfinished line there (`fpm_stdio_child_said`). A child of
/// fpmd's writes it only if its script does; it ends a line here too.
pub const FLUSH_MARKER: &[u8] = b"\0fscf\0";

/// Where the text of one read ends a line, for [`Lines::feed`].
enum End {
    /// The line's text ends at the first index; the second is where the
    /// next line's starts (past the newline or the marker).
    At(usize, usize),
    /// From this index on, the bytes may begin [`FLUSH_MARKER`], whose
    /// end is still to come: kept until the next read says.
    Held(usize),
    /// No end in it.
    None,
}

/// The first end of a line in `data` (see [`End`]).
fn next_end(data: &[u8]) -> End {
    let mut from = 0;
    while let Some(j) = memchr::memchr2(b'\n', 0, &data[from..]) {
        let i = from + j;
        if data[i] == b'\n' {
            return End::At(i, i + 1);
        }
        let rest = &data[i..];
        if rest.starts_with(FLUSH_MARKER) {
            return End::At(i, i + FLUSH_MARKER.len());
        }
        if FLUSH_MARKER.starts_with(rest) {
            return End::Held(i);
        }
        from = i + 1;
    }
    End::None
}

/// The rate limit of each writer (pid), whatever `catch_workers_output`
/// says: 1000 lines/s and 128 KiB/s sustained, bursts of 2000 lines and
/// 256 KiB. A child that logs a few lines per request stays far below it;
/// a script that floods stderr adds at most the burst plus 128 KiB (and
/// 1000 lines' prefixes) per second to fpmd's log, however fast it writes.
pub const CHILD_RATE: Rate = Rate {
    lines_per_sec: 1000,
    bytes_per_sec: 128 * 1024,
    burst_lines: 2000,
    burst_bytes: 256 * 1024,
};

/// A token bucket's figures: sustained lines and bytes per second, and the
/// burst (the bucket's size, and what a writer that was quiet may write at
/// once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub lines_per_sec: u32,
    pub bytes_per_sec: u32,
    pub burst_lines: u32,
    pub burst_bytes: u32,
}

/// Lines and bytes dropped by a [`TokenBucket`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Dropped {
    pub lines: u64,
    pub bytes: u64,
}

/// One writer's rate limit: a line of `len` bytes takes one line token and
/// `len` byte tokens; both refill continuously at the [`Rate`] up to the
/// burst. Pure: time comes in as `now` (never read from the clock), and a
/// `now` earlier than one seen before counts as no time passing.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    pub(super) rate: Rate,
    pub(super) lines: f64,
    pub(super) bytes: f64,
    pub(super) at: Instant,
    pub(super) dropped: Dropped,
    /// When the first of the drops not yet reported happened.
    pub(super) dropped_since: Option<Instant>,
}

impl TokenBucket {
    /// A full bucket at `now`.
    pub fn new(rate: Rate, now: Instant) -> TokenBucket {
        TokenBucket {
            rate,
            lines: rate.burst_lines as f64,
            bytes: rate.burst_bytes as f64,
            at: now,
            dropped: Dropped::default(),
            dropped_since: None,
        }
    }

    fn refill(&mut self, now: Instant) {
        if now <= self.at {
            return;
        }
        let dt = now.duration_since(self.at).as_secs_f64();
        self.at = now;
        self.lines =
            (self.lines + dt * self.rate.lines_per_sec as f64).min(self.rate.burst_lines as f64);
        self.bytes =
            (self.bytes + dt * self.rate.bytes_per_sec as f64).min(self.rate.burst_bytes as f64);
    }

    /// Takes the tokens of one line of `len` bytes if they are there
    /// (`true`: log it); otherwise counts it as dropped (`false`).
    pub fn admit(&mut self, now: Instant, len: usize) -> bool {
        self.refill(now);
        if self.lines >= 1.0 && self.bytes >= len as f64 {
            self.lines -= 1.0;
            self.bytes -= len as f64;
            true
        } else {
            self.drop_bulk(now, 1, len as u64);
            false
        }
    }

    /// No line could be admitted at `now` (less than one line token or one
    /// byte token left): the caller may drop a whole read without
    /// splitting it.
    pub fn exhausted(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.lines < 1.0 || self.bytes < 1.0
    }

    /// The bucket is full again at `now` (the writer has been quiet long
    /// enough to be forgotten).
    pub fn is_full(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.lines >= self.rate.burst_lines as f64 && self.bytes >= self.rate.burst_bytes as f64
    }

    /// Counts `lines` lines and `bytes` bytes as dropped without looking at
    /// the tokens.
    pub fn drop_bulk(&mut self, now: Instant, lines: u64, bytes: u64) {
        if lines == 0 && bytes == 0 {
            return;
        }
        self.dropped.lines += lines;
        self.dropped.bytes += bytes;
        self.dropped_since.get_or_insert(now);
    }

    /// What was dropped since the last call, and since when; `None` when
    /// nothing was.
    pub fn take_dropped(&mut self) -> Option<(Dropped, Instant)> {
        let since = self.dropped_since.take()?;
        Some((std::mem::take(&mut self.dropped), since))
    }
}

/// One writer's stream cut into log lines: bytes in, lines of at most the
/// caller's `max` bytes out (without the `\n` or [`FLUSH_MARKER`], and
/// without a `\r` before a newline; empty lines are skipped), each
/// admitted by the writer's
/// [`TokenBucket`]. Pure apart from the `emit` callback, which gets the
/// line and whether it is a piece of a longer line that continues.
#[derive(Debug, Default)]
pub struct Lines {
    /// The unfinished line (shorter than `max`, or exactly that long).
    pub(super) partial: Vec<u8>,
    /// The last bytes of the last read, which may begin [`FLUSH_MARKER`].
    pub(super) held: Vec<u8>,
    /// When `partial` got its first byte.
    pub(super) since: Option<Instant>,
    /// The rest of the current line is dropped (its start was).
    pub(super) skipping: bool,
}

impl Lines {
    /// Cuts `data` into lines; complete ones go to `emit` if the bucket
    /// admits them, the unfinished tail is kept for the next call. Once the
    /// bucket is empty, the rest of `data` is counted as dropped without
    /// being split (cheap for a flood), and so is the rest of a line whose
    /// start was dropped.
    pub fn feed(
        &mut self,
        data: &[u8],
        max: usize,
        now: Instant,
        bucket: &mut TokenBucket,
        emit: &mut dyn FnMut(&[u8], bool),
    ) {
        if self.held.is_empty() {
            self.feed_bytes(data, max, now, bucket, emit);
        } else {
            let mut joined = std::mem::take(&mut self.held);
            joined.extend_from_slice(data);
            self.feed_bytes(&joined, max, now, bucket, emit);
        }
    }

    fn feed_bytes(
        &mut self,
        mut data: &[u8],
        max: usize,
        now: Instant,
        bucket: &mut TokenBucket,
        emit: &mut dyn FnMut(&[u8], bool),
    ) {
        while !data.is_empty() {
            if self.skipping {
                match next_end(data) {
                    End::None => return bucket.drop_bulk(now, 0, data.len() as u64),
                    End::Held(i) => {
                        bucket.drop_bulk(now, 0, i as u64);
                        self.held = data[i..].to_vec();
                        self.since.get_or_insert(now);
                        return;
                    }
                    End::At(_, next) => {
                        bucket.drop_bulk(now, 0, next as u64);
                        data = &data[next..];
                        self.skipping = false;
                        continue;
                    }
                }
            }
            if bucket.exhausted(now) {
                let ends = memchr::memchr_iter(b'\n', data).count() as u64;
                let tail = !data.ends_with(b"\n");
                bucket.drop_bulk(
                    now,
                    ends + u64::from(tail),
                    (self.partial.len() + data.len()) as u64,
                );
                self.partial.clear();
                self.since = None;
                self.skipping = tail;
                return;
            }
            match next_end(data) {
                End::At(i, next) => {
                    self.push(&data[..i], true, max, now, bucket, emit);
                    data = &data[next..];
                }
                End::Held(i) => {
                    self.push(&data[..i], false, max, now, bucket, emit);
                    self.held = data[i..].to_vec();
                    self.since.get_or_insert(now);
                    return;
                }
                End::None => {
                    self.push(data, false, max, now, bucket, emit);
                    return;
                }
            }
        }
    }

    /// Adds `bytes` to the current line; `end`: a newline followed them.
    fn push(
        &mut self,
        mut bytes: &[u8],
        end: bool,
        max: usize,
        now: Instant,
        bucket: &mut TokenBucket,
        emit: &mut dyn FnMut(&[u8], bool),
    ) {
        // Whole `max` pieces while more than one piece is there.
        while self.partial.len() + bytes.len() > max {
            if self.partial.is_empty() {
                let cut = char_cut(bytes, max);
                Self::line(&bytes[..cut], true, now, bucket, emit);
                bytes = &bytes[cut..];
            } else {
                // One byte past the limit, so that char_cut sees what
                // follows it (there are that many: the loop's condition).
                let take = max + 1 - self.partial.len();
                self.partial.extend_from_slice(&bytes[..take]);
                bytes = &bytes[take..];
                let cut = char_cut(&self.partial, max);
                Self::line(&self.partial[..cut], true, now, bucket, emit);
                self.partial.drain(..cut);
            }
        }
        if end {
            if self.partial.is_empty() {
                Self::line(bytes, false, now, bucket, emit);
            } else {
                self.partial.extend_from_slice(bytes);
                Self::line(&self.partial, false, now, bucket, emit);
                self.partial.clear();
            }
            self.since = None;
        } else {
            self.partial.extend_from_slice(bytes);
            if self.partial.is_empty() {
                self.since = None;
            } else {
                self.since.get_or_insert(now);
            }
        }
    }

    fn line(
        mut text: &[u8],
        continued: bool,
        now: Instant,
        bucket: &mut TokenBucket,
        emit: &mut dyn FnMut(&[u8], bool),
    ) {
        if !continued {
            text = text.strip_suffix(b"\r").unwrap_or(text);
            if text.is_empty() {
                return;
            }
        }
        if bucket.admit(now, text.len()) {
            emit(text, continued);
        }
    }

    /// Logs the unfinished line as it is when it has waited `after` or
    /// longer (`Duration::ZERO`: now, e.g. at the end of the stream).
    pub fn flush(
        &mut self,
        now: Instant,
        after: Duration,
        bucket: &mut TokenBucket,
        emit: &mut dyn FnMut(&[u8], bool),
    ) {
        let stale = self
            .since
            .is_some_and(|t| now.saturating_duration_since(t) >= after);
        if stale {
            // Held bytes whose marker never came are the line's text.
            if !self.skipping {
                self.partial.append(&mut self.held);
            }
            self.held.clear();
            Self::line(&self.partial, false, now, bucket, emit);
            self.partial.clear();
            self.since = None;
        }
        if after.is_zero() {
            self.skipping = false;
        }
    }

    /// Nothing unfinished is kept.
    pub fn is_empty(&self) -> bool {
        self.partial.is_empty() && self.held.is_empty() && !self.skipping
    }
}

/// Where to cut `bytes` (longer than `max`) at most `max` bytes in: before
/// a UTF-8 continuation byte if one is at `max` (up to 3 bytes back), so a
/// character is not split across two log lines.
pub(super) fn char_cut(bytes: &[u8], max: usize) -> usize {
    let mut cut = max;
    while cut > max.saturating_sub(3) && bytes.get(cut).is_some_and(|b| b & 0xc0 == 0x80) {
        cut -= 1;
    }
    if cut == 0 || bytes.get(cut).is_some_and(|b| b & 0xc0 == 0x80) {
        max
    } else {
        cut
    }
}
