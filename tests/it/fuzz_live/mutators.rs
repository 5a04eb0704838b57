//! How valid requests are broken: their CGI parameters
//! ([`mutate_params`]: CONTENT_LENGTH lies, missing or garbage values,
//! huge ones, odd names, broken pairs), their records ([`mutate_records`]:
//! types, ids, lengths, padding that hides records, splits, merges, drops,
//! repeats, intruders) and their bytes ([`mutate_bytes`]).

use super::checks::type_name;
use super::requests::{begin_rec, get_values_body, set_param, Params, Rec};
use super::rng::{short, Rng};
use crate::harness::fcgi::*;
use std::path::Path;

/// Lies about the body and other bad CGI parameters; may return bytes to
/// append to the encoded pairs (a broken pair).
pub(super) fn mutate_params(
    rng: &mut Rng,
    p: &mut Params,
    docroot: &Path,
    body_len: usize,
    only_content_length: bool,
    notes: &mut Vec<String>,
) -> Vec<u8> {
    let mut tail = Vec::new();
    let n = if only_content_length {
        1
    } else {
        rng.range(1, 2)
    };
    for _ in 0..n {
        let op = if only_content_length {
            0
        } else {
            rng.below(10)
        };
        match op {
            0..=2 => {
                // Too big, too small, negative, garbage.
                let lie: Vec<u8> = match rng.below(4) {
                    0 => match rng.below(3) {
                        0 => (body_len + 1).to_string().into(),
                        1 => (body_len + 1 + rng.below(1 << 20)).to_string().into(),
                        _ => b"99999999999999999999999999".to_vec(),
                    },
                    1 => match rng.below(3) {
                        0 => body_len
                            .saturating_sub(1 + rng.below(100))
                            .to_string()
                            .into(),
                        1 => b"0".to_vec(),
                        _ => format!("+{}", body_len / 2).into(),
                    },
                    2 => rng
                        .pick(&["-1", "-100000", "-0", " -5", "-9223372036854775808"])
                        .into(),
                    _ => match rng.below(8) {
                        0 => b"abc".to_vec(),
                        1 => Vec::new(),
                        2 => format!(" {body_len}").into(),
                        3 => format!("{body_len} ").into(),
                        4 => b"0x10".to_vec(),
                        5 => b"1e3".to_vec(),
                        6 => b"18446744073709551616".to_vec(),
                        _ => {
                            let n = rng.range(1, 12);
                            rng.bytes(n)
                        }
                    },
                };
                notes.push(format!("CONTENT_LENGTH={:?}", short(&lie)));
                if rng.chance(20) {
                    p.push((b"CONTENT_LENGTH".to_vec(), lie));
                } else {
                    set_param(p, "CONTENT_LENGTH", lie);
                }
            }
            3 if !p.is_empty() => {
                let i = rng.below(p.len());
                notes.push(format!("without {}", short(&p[i].0)));
                p.remove(i);
            }
            4 if !p.is_empty() => {
                let i = rng.below(p.len());
                let n = rng.below(300);
                notes.push(format!("garbage {}", short(&p[i].0)));
                p[i].1 = rng.bytes(n);
            }
            5 => {
                let n = rng.range(65_000, 70_000);
                notes.push(format!("one value of {n} bytes"));
                p.push((b"HTTP_X_FUZZ_LONG".to_vec(), vec![b'L'; n]));
            }
            6 if rng.chance(30) => {
                let total = rng.pick(&[70_000, 140_000, 400_000, 1_100_000, 1_300_000]);
                notes.push(format!("huge PARAMS ({total} bytes)"));
                let mut n = 0;
                let mut size = 0;
                while size < total {
                    let k = format!("HTTP_X_FUZZ_{n}").into_bytes();
                    size += k.len() + 1000 + 5;
                    p.push((k, vec![b'v'; 1000]));
                    n += 1;
                }
            }
            7 => {
                notes.push("odd names".into());
                p.push((Vec::new(), b"empty name".to_vec()));
                p.push((b"A=B".to_vec(), b"c".to_vec()));
                p.push((b"NUL\0NAME".to_vec(), b"v\0v".to_vec()));
            }
            8 => {
                let script = match rng.below(7) {
                    0 => docroot.join("hello.php/extra/path").display().to_string(),
                    1 => format!("{}/../docroot/hello.php", docroot.display()),
                    2 => docroot.join("missing.php").display().to_string(),
                    3 => "hello.php".into(),
                    4 => String::new(),
                    5 => docroot.display().to_string(),
                    _ => format!("{}/hello.php\0.txt", docroot.display()),
                };
                notes.push(format!("SCRIPT_FILENAME={script:?}"));
                set_param(p, "SCRIPT_FILENAME", script);
            }
            _ => {
                // A pair whose lengths run past the end of the stream.
                notes.push("broken pair".into());
                let n = rng.below(200);
                tail.extend_from_slice(&[0x80, 0, rng.below(256) as u8, 1, 5]);
                tail.extend(rng.bytes(n));
            }
        }
    }
    tail
}

/// Changes to the records of a request.
pub(super) fn mutate_records(
    rng: &mut Rng,
    recs: &mut Vec<Rec>,
    id: u16,
    hidden: &[u8],
    notes: &mut Vec<String>,
) {
    for _ in 0..rng.range(1, 3) {
        if recs.is_empty() {
            recs.push(Rec::new(STDIN, id, Vec::new(), Vec::new()));
        }
        let i = rng.below(recs.len());
        let at = rng.below(recs.len() + 1);
        match rng.below(20) {
            0 => {
                let t = if rng.chance(70) {
                    rng.below(13) as u8
                } else {
                    rng.next() as u8
                };
                notes.push(format!("record {i}: type {} -> {t}", recs[i].ty));
                recs[i].ty = t;
            }
            1 => {
                let any = rng.next() as u16;
                let new = rng.pick(&[0, id.wrapping_add(1), any, 65535]);
                notes.push(format!("record {i}: id {} -> {new}", recs[i].id));
                recs[i].id = new;
            }
            2 => {
                let l = recs[i].content.len();
                let any = rng.below(65536);
                let new = rng.pick(&[l + 1, l.saturating_sub(1), 0, 65535, l + 8, any]) as u16;
                notes.push(format!("record {i}: content length {l} -> {new}"));
                recs[i].len = Some(new);
            }
            3 => {
                let n = rng.below(256);
                notes.push(format!("record {i}: {n} bytes of padding"));
                recs[i].pad = rng.bytes(n);
            }
            4 => {
                // Padding that hides whole records: the ones after it, or a forged request.
                let mut hide = Vec::new();
                let mut k = i + 1;
                while k < recs.len() {
                    let mut e = Vec::new();
                    recs[k].encode(&mut e);
                    if hide.len() + e.len() > 255 {
                        break;
                    }
                    hide.extend(e);
                    k += 1;
                }
                if k > i + 1 && rng.chance(50) {
                    notes.push(format!(
                        "records {}..{k} hidden in the padding of {i}",
                        i + 1
                    ));
                    recs.drain(i + 1..k);
                    recs[i].pad = hide;
                } else if hidden.len() <= 255 {
                    notes.push(format!(
                        "a forged request hidden in the padding of record {i}"
                    ));
                    recs[i].pad = hidden.to_vec();
                }
            }
            5 if recs[i].content.len() >= 2 => {
                let cut = rng.range(1, recs[i].content.len() - 1);
                notes.push(format!("record {i} split at {cut}"));
                let tail = recs[i].content.split_off(cut);
                let mut r = recs[i].clone();
                r.content = tail;
                r.len = None;
                recs[i].len = None;
                recs.insert(i + 1, r);
            }
            6 if i + 1 < recs.len()
                && recs[i].content.len() + recs[i + 1].content.len() <= 65535 =>
            {
                notes.push(format!("records {i} and {} merged", i + 1));
                let next = recs.remove(i + 1);
                recs[i].content.extend(next.content);
                recs[i].len = None;
            }
            7 => {
                notes.push(format!("record {i} ({}) deleted", type_name(recs[i].ty)));
                recs.remove(i);
            }
            8 => {
                notes.push(format!("record {i} ({}) sent twice", type_name(recs[i].ty)));
                let r = recs[i].clone();
                recs.insert(i + 1, r);
            }
            9 => {
                let new = if rng.chance(50) {
                    id
                } else {
                    rng.next() as u16
                };
                notes.push(format!("second BEGIN_REQUEST (id {new}) at {at}"));
                let flags = rng.below(2) as u8;
                let b = begin_rec(rng, new, flags);
                recs.insert(at, b);
            }
            10 => {
                let to = if rng.chance(80) {
                    id
                } else {
                    rng.next() as u16
                };
                notes.push(format!("ABORT_REQUEST (id {to}) at {at}"));
                recs.insert(at, Rec::new(ABORT_REQUEST, to, Vec::new(), Vec::new()));
            }
            11 => {
                let huge = rng.chance(30);
                notes.push(format!(
                    "{} GET_VALUES at {at}",
                    if huge { "huge" } else { "small" }
                ));
                let c = get_values_body(rng, huge);
                let to = if rng.chance(85) { 0 } else { id };
                recs.insert(at, Rec::new(GET_VALUES, to, c, Vec::new()));
            }
            12 => {
                let t = rng.range(12, 255) as u8;
                let to = if rng.chance(60) { 0 } else { id };
                notes.push(format!("unknown type {t} (id {to}) at {at}"));
                let n = rng.below(64);
                let c = rng.bytes(n);
                recs.insert(at, Rec::new(t, to, c, Vec::new()));
            }
            13 => {
                let any = rng.next() as u8;
                let v = rng.pick(&[0, 2, 255, any]);
                notes.push(format!("record {i}: version {v}"));
                recs[i].version = v;
            }
            14 => {
                notes.push(format!("records cut after {i}"));
                recs.truncate(i);
            }
            15 if i + 1 < recs.len() => {
                notes.push(format!("records {i} and {} swapped", i + 1));
                recs.swap(i, i + 1);
            }
            16 => {
                notes.push(format!("DATA record at {at}"));
                let n = rng.below(100);
                let c = rng.bytes(n);
                recs.insert(at, Rec::new(DATA, id, c, Vec::new()));
            }
            17 => {
                notes.push(format!("STDIN record at {at}"));
                let n = rng.range(1, 100);
                let c = rng.bytes(n);
                recs.insert(at, Rec::new(STDIN, id, c, Vec::new()));
            }
            18 => {
                notes.push(format!("record {i} moved to the end"));
                let r = recs.remove(i);
                recs.push(r);
            }
            _ => {
                if let Some(b) = recs.iter_mut().find(|r| r.ty == BEGIN_REQUEST) {
                    match rng.below(3) {
                        0 => {
                            let any = rng.next() as u16;
                            let role = rng.pick(&[0u16, 2, 3, any]);
                            notes.push(format!("role {role}"));
                            if b.content.len() >= 2 {
                                b.content[..2].copy_from_slice(&role.to_be_bytes());
                            }
                        }
                        1 => {
                            let n = rng.pick(&[0, 4, 7, 9, 16]);
                            notes.push(format!("BEGIN_REQUEST body of {n} bytes"));
                            b.content.resize(n, 0);
                        }
                        _ => {
                            let f = rng.next() as u8;
                            notes.push(format!("flags {f:#x}"));
                            if b.content.len() > 2 {
                                b.content[2] = f;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Flips, inserts, deletes, cuts, repeats bytes (half of the time in the first 64).
pub(super) fn mutate_bytes(rng: &mut Rng, b: &mut Vec<u8>, notes: &mut Vec<String>) {
    for _ in 0..rng.range(1, 3) {
        if b.is_empty() {
            return;
        }
        let pos = if rng.chance(25) {
            rng.below(b.len().min(16))
        } else {
            rng.below(b.len())
        };
        match rng.below(6) {
            0 => {
                let x = rng.range(1, 255) as u8;
                notes.push(format!("byte {pos} ^= {x:#x}"));
                b[pos] ^= x;
            }
            1 => {
                let n = rng.range(1, 16);
                notes.push(format!("{n} bytes inserted at {pos}"));
                let ins = rng.bytes(n);
                b.splice(pos..pos, ins);
            }
            2 => {
                let n = rng.range(1, 16).min(b.len() - pos);
                notes.push(format!("{n} bytes deleted at {pos}"));
                b.drain(pos..pos + n);
            }
            3 => {
                notes.push(format!("cut at byte {pos}"));
                b.truncate(pos);
            }
            4 => {
                let n = rng.range(1, 64).min(b.len() - pos);
                let to = rng.below(b.len());
                notes.push(format!("bytes {pos}..{} repeated at {to}", pos + n));
                let dup = b[pos..pos + n].to_vec();
                b.splice(to..to, dup);
            }
            _ => {
                let v = rng.pick(&[0u8, 1, 8, 0x7f, 0x80, 0xff]);
                notes.push(format!("byte {pos} = {v:#x}"));
                b[pos] = v;
            }
        }
    }
}
