//! The fuzzer's PRNG (the bytes each fuzz connection sends follow from
//! the seed) and the markers that tie a request, or an answer, to the
//! connection or good request that owns it; `short` and `hex` for reports.

use super::LISTENERS;
use crate::harness::fcgi::noise;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// xorshift64, seeded through splitmix64 so that close seeds differ.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }
    pub(super) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// 0..n (n > 0).
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    /// lo..=hi.
    pub(super) fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }
    pub(super) fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    pub(super) fn bytes(&mut self, n: usize) -> Vec<u8> {
        noise(self.next(), n)
    }
    pub(super) fn pick<T: Clone>(&mut self, v: &[T]) -> T {
        v[self.below(v.len())].clone()
    }
    pub(super) fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi - lo + 1))
    }
}

/// Every marker handed out (its 64-bit value) and the connection or good
/// request that owns it: `listener << 56 | thread << 48 | counter`.
fn markers() -> &'static Mutex<HashMap<u64, u64>> {
    static M: OnceLock<Mutex<HashMap<u64, u64>>> = OnceLock::new();
    M.get_or_init(Default::default)
}

const MARK: &[u8] = b"FZMK";

/// `FZMK` and 16 hex digits, owned by `owner`.
pub(super) fn new_marker(rng: &mut Rng, owner: u64) -> String {
    let v = rng.next();
    markers().lock().unwrap().insert(v, owner);
    format!("FZMK{v:016x}")
}

pub(super) fn owner(listener: usize, thread: usize, n: u64) -> u64 {
    (listener as u64) << 56 | (thread as u64) << 48 | n
}

pub(super) fn owner_name(o: u64) -> String {
    let (l, t, n) = (o >> 56, (o >> 48) & 0xff, o & 0xffff_ffff_ffff);
    let who = if t >= 0x80 {
        format!("good{}", t - 0x80)
    } else {
        format!("fuzz{t}")
    };
    format!("{}/{who}#{n}", LISTENERS[l as usize])
}

/// Markers in `text` that belong to someone else than `own`.
pub(super) fn foreign_markers(text: &[u8], own: u64) -> Vec<String> {
    let reg = markers().lock().unwrap();
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = text[at..].windows(MARK.len()).position(|w| w == MARK) {
        let start = at + i + MARK.len();
        at = start;
        let Some(hex) = text.get(start..start + 16) else {
            break;
        };
        if !hex
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
        {
            continue;
        }
        let v = u64::from_str_radix(std::str::from_utf8(hex).unwrap(), 16).unwrap();
        if let Some(&o) = reg.get(&v) {
            if o != own {
                out.push(format!(
                    "FZMK{} (owned by {})",
                    String::from_utf8_lossy(hex),
                    owner_name(o)
                ));
            }
        }
    }
    out
}

pub(super) fn short(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let mut t: String = s.chars().take(300).collect();
    if s.chars().count() > 300 {
        t.push_str("...");
    }
    t
}

pub(super) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
