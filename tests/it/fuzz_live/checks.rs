//! What is verified of every connection: the records it sent, framed as
//! fpmd frames them ([`Sent`]), against what fpmd answered ([`Got`]):
//! well-formed FastCGI for what was sent, with no other connection's
//! marker; the answer of a legal request must be the right one too
//! ([`Expect`]). And, before the run, that this client works at all.

use super::rng::{foreign_markers, hex, short};
use super::sock::{Sock, Target};
use crate::harness::fcgi::{self, *};
use crate::harness::LONG;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::Path;

/// The records a connection sent, framed by their headers as fpmd frames
/// them (padding skipped, so a record hidden in padding is no record).
#[derive(Default)]
pub(super) struct Sent {
    hdr: [u8; 8],
    have: usize,
    skip: usize,
    /// BEGIN_REQUEST records per request id (not 0).
    pub(super) begins: HashMap<u16, u32>,
    /// GET_VALUES records of request id 0.
    pub(super) get_values: u32,
    /// Types of the other records of request id 0.
    pub(super) mgmt: Vec<u8>,
    pub(super) records: u64,
    pub(super) bytes: u64,
    /// The first 64 KiB sent, for reports.
    pub(super) log: Vec<u8>,
}

impl Sent {
    pub(super) fn feed(&mut self, mut b: &[u8]) {
        self.bytes += b.len() as u64;
        let room = (64usize << 10).saturating_sub(self.log.len());
        self.log.extend_from_slice(&b[..room.min(b.len())]);
        while !b.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(b.len());
                self.skip -= n;
                b = &b[n..];
                continue;
            }
            let n = (8 - self.have).min(b.len());
            self.hdr[self.have..self.have + n].copy_from_slice(&b[..n]);
            self.have += n;
            b = &b[n..];
            if self.have == 8 {
                self.have = 0;
                let h = self.hdr;
                self.records += 1;
                self.skip = u16::from_be_bytes([h[4], h[5]]) as usize + h[6] as usize;
                match (h[1], u16::from_be_bytes([h[2], h[3]])) {
                    (GET_VALUES, 0) => self.get_values += 1,
                    (t, 0) => self.mgmt.push(t),
                    (BEGIN_REQUEST, id) => *self.begins.entry(id).or_default() += 1,
                    _ => {}
                }
            }
        }
    }
}

/// One request fpmd ended.
pub(super) struct Done {
    pub(super) id: u16,
    pub(super) stdout: Vec<u8>,
    pub(super) protocol_status: u8,
}

/// What fpmd sent on a connection.
#[derive(Default)]
pub(super) struct Got {
    buf: Vec<u8>,
    pub(super) ends: HashMap<u16, u32>,
    /// STDOUT and STDERR of requests not ended yet.
    open: HashMap<u16, (Vec<u8>, Vec<u8>)>,
    pub(super) done: Vec<Done>,
    pub(super) gv: u32,
    pub(super) unknown: u32,
    pub(super) records: u64,
    pub(super) answers: u64,
    bytes: u64,
    /// fpmd closed (end of file).
    pub(super) eof: bool,
    /// A write failed: had fpmd reset the connection, the write took the
    /// error and a later read sees an end of file, with the tail of what
    /// fpmd sent thrown away by the kernel.
    pub(super) write_failed: bool,
    /// A read failed (reset).
    pub(super) reset: bool,
}

const KEEP_OUTPUT: usize = 4 << 20;

impl Got {
    pub(super) fn closed(&self) -> bool {
        self.eof || self.reset
    }

    /// Takes bytes fpmd sent; an error says how they are not well-formed
    /// FastCGI for what was sent, or carry someone else's marker.
    pub(super) fn take(&mut self, data: &[u8], sent: &Sent, own: u64) -> Result<(), String> {
        self.bytes += data.len() as u64;
        self.buf.extend_from_slice(data);
        let mut at = 0;
        let mut res = Ok(());
        while self.buf.len() - at >= 8 {
            let b = &self.buf[at..];
            let len = u16::from_be_bytes([b[4], b[5]]) as usize;
            let pad = b[6] as usize;
            if b.len() < 8 + len + pad {
                break;
            }
            let (version, ty, id) = (b[0], b[1], u16::from_be_bytes([b[2], b[3]]));
            let content = b[8..8 + len].to_vec();
            at += 8 + len + pad;
            self.records += 1;
            res = self.record(version, ty, id, content, sent, own);
            if res.is_err() {
                break;
            }
        }
        self.buf.drain(..at);
        res
    }

    fn record(
        &mut self,
        version: u8,
        ty: u8,
        id: u16,
        content: Vec<u8>,
        sent: &Sent,
        own: u64,
    ) -> Result<(), String> {
        if version != VERSION {
            return Err(format!(
                "fpmd sent a record of version {version} (type {ty})"
            ));
        }
        match ty {
            STDOUT | STDERR | END_REQUEST => {
                let begun = sent.begins.get(&id).copied().unwrap_or(0);
                let ended = self.ends.get(&id).copied().unwrap_or(0);
                if id == 0 || ended >= begun {
                    return Err(format!(
                        "fpmd sent {} for request id {id}, of which {begun} BEGIN_REQUEST were sent and {ended} END_REQUEST received",
                        type_name(ty)
                    ));
                }
                let out = self.open.entry(id).or_default();
                match ty {
                    STDOUT if out.0.len() < KEEP_OUTPUT => out.0.extend_from_slice(&content),
                    STDERR if out.1.len() < KEEP_OUTPUT => out.1.extend_from_slice(&content),
                    END_REQUEST => {
                        if content.len() != 8 {
                            return Err(format!(
                                "END_REQUEST of request id {id} with {} bytes of body",
                                content.len()
                            ));
                        }
                        if content[4] > 3 {
                            return Err(format!(
                                "END_REQUEST of request id {id} with protocol status {}",
                                content[4]
                            ));
                        }
                        let (stdout, stderr) = self.open.remove(&id).unwrap_or_default();
                        check_markers(&stdout, own, "STDOUT")?;
                        check_markers(&stderr, own, "STDERR")?;
                        *self.ends.entry(id).or_default() += 1;
                        self.answers += 1;
                        self.done.push(Done {
                            id,
                            stdout,
                            protocol_status: content[4],
                        });
                    }
                    _ => {}
                }
            }
            GET_VALUES_RESULT => {
                if id != 0 || self.gv >= sent.get_values {
                    return Err(format!(
                        "GET_VALUES_RESULT number {} (request id {id}) for {} GET_VALUES sent",
                        self.gv + 1,
                        sent.get_values
                    ));
                }
                let pairs = strict_pairs(&content).ok_or_else(|| {
                    format!(
                        "GET_VALUES_RESULT is not name-value pairs: {}",
                        hex(&content)
                    )
                })?;
                for (n, v) in pairs {
                    let ok = match &n[..] {
                        b"FCGI_MPXS_CONNS" => v == b"0",
                        b"FCGI_MAX_CONNS" | b"FCGI_MAX_REQS" => {
                            !v.is_empty() && v.iter().all(u8::is_ascii_digit)
                        }
                        _ => false,
                    };
                    if !ok {
                        return Err(format!(
                            "GET_VALUES_RESULT says {}={}",
                            short(&n),
                            short(&v)
                        ));
                    }
                }
                self.gv += 1;
                self.answers += 1;
            }
            UNKNOWN_TYPE => {
                if id != 0
                    || content.len() != 8
                    || self.unknown as usize >= sent.mgmt.len()
                    || !sent.mgmt.contains(&content[0])
                {
                    return Err(format!(
                        "UNKNOWN_TYPE (request id {id}, body {}) for the types {:?} sent with request id 0",
                        hex(&content),
                        sent.mgmt
                    ));
                }
                self.unknown += 1;
                self.answers += 1;
            }
            _ => {
                return Err(format!(
                    "fpmd sent a record of type {ty} ({})",
                    type_name(ty)
                ))
            }
        }
        Ok(())
    }

    /// At the end of the connection: the output of unended requests, and
    /// what was left of a record when fpmd closed.
    pub(super) fn finish(&mut self, own: u64) -> Result<(), String> {
        for (stdout, stderr) in self.open.values() {
            check_markers(stdout, own, "STDOUT")?;
            check_markers(stderr, own, "STDERR")?;
        }
        if self.eof && !self.write_failed && !self.buf.is_empty() {
            return Err(format!(
                "fpmd closed the connection in the middle of a record ({} bytes: {})",
                self.buf.len(),
                hex(&self.buf[..self.buf.len().min(64)])
            ));
        }
        Ok(())
    }
}

fn check_markers(out: &[u8], own: u64, what: &str) -> Result<(), String> {
    let foreign = foreign_markers(out, own);
    if foreign.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{what} carries another connection's marker {foreign:?}: {}",
        short(out)
    ))
}

pub(super) fn type_name(ty: u8) -> &'static str {
    match ty {
        BEGIN_REQUEST => "BEGIN_REQUEST",
        ABORT_REQUEST => "ABORT_REQUEST",
        END_REQUEST => "END_REQUEST",
        PARAMS => "PARAMS",
        STDIN => "STDIN",
        STDOUT => "STDOUT",
        STDERR => "STDERR",
        DATA => "DATA",
        GET_VALUES => "GET_VALUES",
        GET_VALUES_RESULT => "GET_VALUES_RESULT",
        UNKNOWN_TYPE => "UNKNOWN_TYPE",
        _ => "an unknown type",
    }
}

/// Name-value pairs that fill `b` exactly, or None.
fn strict_pairs(mut b: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    fn len(b: &mut &[u8]) -> Option<usize> {
        let first = *b.first()?;
        if first < 128 {
            *b = &b[1..];
            return Some(first as usize);
        }
        let l = b.get(..4)?;
        let n = u32::from_be_bytes([l[0] & 0x7f, l[1], l[2], l[3]]) as usize;
        *b = &b[4..];
        Some(n)
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let n = len(&mut b)?;
        let v = len(&mut b)?;
        let name = b.get(..n)?.to_vec();
        let value = b.get(n..n + v)?.to_vec();
        b = &b[n + v..];
        out.push((name, value));
    }
    Some(out)
}

#[derive(Clone, Debug)]
pub(super) enum Expect {
    Hello(String),
    Body(usize, String),
    Sleep,
    Vars(String),
    /// big.php?mb=N.
    Big(usize),
}

impl Expect {
    /// Checks the STDOUT of a legal request.
    pub(super) fn check(&self, stdout: &[u8]) -> Result<(), String> {
        let (status, _, body) = cgi_response(stdout);
        let text = String::from_utf8_lossy(&body);
        let ok = status == 200
            && match self {
                Expect::Hello(m) => text == format!("hello {m}\nQUERY_STRING=name={m}\n"),
                Expect::Body(n, md5) => text == format!("{n} {md5}"),
                Expect::Sleep => text.ends_with(" done"),
                Expect::Big(mb) => {
                    body.len() == mb << 20
                        && body.chunks(1024).enumerate().all(|(i, line)| {
                            let c = b'a' + (i % 26) as u8;
                            line[..1023].iter().all(|x| *x == c) && line[1023] == b'\n'
                        })
                }
                Expect::Vars(m) => {
                    text.contains(&format!("\nPATH_INFO=/p/{m}\n"))
                        && text.contains(&format!("\nQUERY_STRING=name={m}\n"))
                }
            };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "expected {self:?}, got status {status}: {:?}",
                short(&body)
            ))
        }
    }
}

/// A raw legal GET of hello.php on `target`, before the run: the fuzzer's
/// own client works on this listener.
pub(super) fn raw_hello_works(target: &Target, docroot: &Path, who: &str) {
    let mut s = Sock::connect(target).unwrap_or_else(|e| panic!("{who}: connect: {e}"));
    s.set_write_timeout(LONG);
    let p = fcgi::params_for(docroot, "hello.php", "name=first", "GET", 0);
    s.write_all(&request(1, 0, &p, b"")).unwrap();
    let mut all = Vec::new();
    s.set_read_timeout(LONG);
    let _ = s.read_to_end(&mut all);
    let mut sent = Sent::default();
    sent.feed(&request(1, 0, &p, b""));
    let mut got = Got::default();
    got.take(&all, &sent, 0)
        .unwrap_or_else(|e| panic!("{who}: {e}"));
    let d = got
        .done
        .first()
        .unwrap_or_else(|| panic!("{who}: no END_REQUEST: {}", short(&all)));
    let (status, _, body) = cgi_response(&d.stdout);
    assert!(
        status == 200 && body.starts_with(b"hello first\n"),
        "{who}: {status} {}",
        short(&body)
    );
}
