//! What the fuzzer starts from: records as built, before they become bytes
//! (anything in them may be made wrong), streams cut anywhere into
//! records, name-value pairs, valid requests of the test scripts with what
//! they must answer, a forged request small enough to hide in padding,
//! GET_VALUES bodies.

use super::checks::Expect;
use super::rng::Rng;
use crate::harness::fcgi::{self, *};
use crate::harness::md5_hex;
use std::path::Path;

/// A record as built, before it becomes bytes: anything may be wrong in it.
#[derive(Clone, Debug)]
pub(super) struct Rec {
    pub(super) version: u8,
    pub(super) ty: u8,
    pub(super) id: u16,
    pub(super) content: Vec<u8>,
    pub(super) pad: Vec<u8>,
    /// Content length written in the header, when it lies.
    pub(super) len: Option<u16>,
}

impl Rec {
    pub(super) fn new(ty: u8, id: u16, content: Vec<u8>, pad: Vec<u8>) -> Rec {
        assert!(content.len() <= 65535 && pad.len() <= 255);
        Rec {
            version: VERSION,
            ty,
            id,
            content,
            pad,
            len: None,
        }
    }
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        let len = self.len.unwrap_or(self.content.len() as u16);
        let [i1, i0] = self.id.to_be_bytes();
        let [l1, l0] = len.to_be_bytes();
        out.extend_from_slice(&[
            self.version,
            self.ty,
            i1,
            i0,
            l1,
            l0,
            self.pad.len() as u8,
            0,
        ]);
        out.extend_from_slice(&self.content);
        out.extend_from_slice(&self.pad);
    }
}

pub(super) fn encode_recs(recs: &[Rec]) -> Vec<u8> {
    let mut v = Vec::new();
    for r in recs {
        r.encode(&mut v);
    }
    v
}

/// Padding to a multiple of 8 with zeros, or (legal too) 0 to 255 bytes of anything.
pub(super) fn padding(rng: &mut Rng, content_len: usize) -> Vec<u8> {
    if rng.chance(70) {
        vec![0; (8 - content_len % 8) % 8]
    } else {
        let n = rng.below(256);
        rng.bytes(n)
    }
}

pub(super) fn begin_rec(rng: &mut Rng, id: u16, flags: u8) -> Rec {
    let [r1, r0] = RESPONDER.to_be_bytes();
    let c = vec![r1, r0, flags, 0, 0, 0, 0, 0];
    let pad = padding(rng, 8);
    Rec::new(BEGIN_REQUEST, id, c, pad)
}

/// A stream cut anywhere into records (any padding), plus its empty end record.
pub(super) fn stream_recs(rng: &mut Rng, ty: u8, id: u16, data: &[u8]) -> Vec<Rec> {
    let style = rng.below(3);
    let mut v = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let max = (data.len() - at).min(65535);
        let n = match style {
            0 => max,
            1 => rng.range(1, max.min(4096)),
            _ => rng.range(1, max),
        };
        let pad = padding(rng, n);
        v.push(Rec::new(ty, id, data[at..at + n].to_vec(), pad));
        at += n;
    }
    let pad = padding(rng, 0);
    v.push(Rec::new(ty, id, Vec::new(), pad));
    v
}

fn nv_len(v: &mut Vec<u8>, n: usize, long: bool) {
    if n < 128 && !long {
        v.push(n as u8);
    } else {
        v.extend_from_slice(&((n as u32) | 0x8000_0000).to_be_bytes());
    }
}

/// Name-value pairs; with `long_lengths`, some short lengths take the
/// (legal) 4-byte form.
pub(super) fn encode_pairs(
    rng: &mut Rng,
    params: &[(Vec<u8>, Vec<u8>)],
    long_lengths: bool,
) -> Vec<u8> {
    let mut v = Vec::new();
    for (k, val) in params {
        nv_len(&mut v, k.len(), long_lengths && rng.chance(30));
        nv_len(&mut v, val.len(), long_lengths && rng.chance(30));
        v.extend_from_slice(k);
        v.extend_from_slice(val);
    }
    v
}

/// CGI parameters as bytes (a mutated one need not be text).
pub(super) type Params = Vec<(Vec<u8>, Vec<u8>)>;

pub(super) fn owned(p: Vec<(String, String)>) -> Params {
    p.into_iter()
        .map(|(k, v)| (k.into_bytes(), v.into_bytes()))
        .collect()
}

pub(super) fn set_param(p: &mut Params, k: &str, v: impl Into<Vec<u8>>) {
    let v = v.into();
    match p.iter_mut().find(|(n, _)| n == k.as_bytes()) {
        Some(e) => e.1 = v,
        None => p.push((k.as_bytes().to_vec(), v)),
    }
}

/// The CGI parameters and body of one valid request, and what it must answer.
pub(super) fn valid_request(
    rng: &mut Rng,
    docroot: &Path,
    marker: &str,
    legal: bool,
) -> (Params, Vec<u8>, Expect) {
    let q = format!("name={marker}");
    match rng.below(100) {
        0..=44 => {
            let p = fcgi::params_for(docroot, "hello.php", &q, "GET", 0);
            (owned(p), Vec::new(), Expect::Hello(marker.into()))
        }
        45..=74 => {
            let n = match rng.below(100) {
                0..=79 => rng.below(20_000),
                80..=96 => rng.range(20_000, 100_000),
                _ => rng.range(260_000, 600_000),
            };
            let body = rng.bytes(n);
            let p = fcgi::params_for(docroot, "body.php", &q, "POST", n);
            let md5 = md5_hex(&body);
            (owned(p), body, Expect::Body(n, md5))
        }
        75..=79 => {
            let mb = rng.range(1, if legal { 2 } else { 8 });
            let p = fcgi::params_for(docroot, "big.php", &format!("mb={mb}&{q}"), "GET", 0);
            (owned(p), Vec::new(), Expect::Big(mb))
        }
        80..=87 => {
            // A rare one runs past request_terminate_timeout.
            let ms = if !legal && rng.chance(2) {
                7000
            } else {
                rng.below(150)
            };
            let p = fcgi::params_for(docroot, "sleep.php", &format!("ms={ms}&{q}"), "GET", 0);
            (owned(p), Vec::new(), Expect::Sleep)
        }
        _ => {
            let mut p = owned(fcgi::params_for(docroot, "server_vars.php", &q, "GET", 0));
            set_param(&mut p, "PATH_INFO", format!("/p/{marker}"));
            set_param(
                &mut p,
                "REQUEST_URI",
                format!("/server_vars.php/p/{marker}?{q}"),
            );
            (p, Vec::new(), Expect::Vars(marker.into()))
        }
    }
}

/// A whole request small enough to hide in the padding of one record.
pub(super) fn forged_request(docroot: &Path, marker: &str) -> Vec<u8> {
    let p = vec![
        (
            "SCRIPT_FILENAME".to_string(),
            docroot.join("hello.php").display().to_string(),
        ),
        ("REQUEST_METHOD".into(), "GET".into()),
        ("QUERY_STRING".into(), format!("name={marker}")),
    ];
    let mut v = begin_request(1, KEEP_CONN);
    v.extend(record(PARAMS, 1, &encode_params(&p)));
    v.extend(record(PARAMS, 1, &[]));
    v.extend(record(STDIN, 1, &[]));
    v
}

/// A GET_VALUES body: the three names (and one fpmd does not know), or
/// one record's worth of names whose answer would exceed one record.
pub(super) fn get_values_body(rng: &mut Rng, huge: bool) -> Vec<u8> {
    let mut q = Vec::new();
    if huge {
        while q.len() + 17 <= 65535 {
            q.extend(name_value(b"FCGI_MPXS_CONNS", b""));
        }
    } else {
        for n in [
            "FCGI_MPXS_CONNS",
            "FCGI_MAX_CONNS",
            "FCGI_MAX_REQS",
            "FCGI_NO_SUCH",
        ] {
            if rng.chance(75) {
                q.extend(name_value(n.as_bytes(), b""));
            }
        }
    }
    q
}
