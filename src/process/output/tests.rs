use super::*;

/// The most bytes per line the tests cut at (php-fpm's default log_limit).
const MAX_LINE: usize = 1024;

const RATE: Rate = Rate {
    lines_per_sec: 10,
    bytes_per_sec: 100,
    burst_lines: 20,
    burst_bytes: 200,
};

fn ms(t0: Instant, n: u64) -> Instant {
    t0 + Duration::from_millis(n)
}

#[test]
fn bucket_admits_the_burst_then_the_rate() {
    let t0 = Instant::now();
    let mut b = TokenBucket::new(RATE, t0);
    let admitted = (0..30).filter(|_| b.admit(t0, 1)).count();
    assert_eq!(admitted, 20, "the burst of lines");
    assert_eq!(
        b.take_dropped(),
        Some((
            Dropped {
                lines: 10,
                bytes: 10
            },
            t0
        ))
    );
    assert_eq!(b.take_dropped(), None, "reported once");
    // 10 lines/s: one line per 100 ms.
    assert!(!b.admit(ms(t0, 50), 1));
    assert!(b.admit(ms(t0, 110), 1));
    assert!(!b.admit(ms(t0, 110), 1));
    // A clock that goes back gives nothing.
    assert!(!b.admit(ms(t0, 10), 1));
    // Bytes: 200 burst, 100/s.
    let mut b = TokenBucket::new(RATE, t0);
    assert!(b.admit(t0, 150));
    assert!(!b.admit(t0, 100), "only 50 bytes left");
    assert!(b.admit(t0, 50));
    assert!(b.exhausted(t0));
    assert!(!b.exhausted(ms(t0, 10)), "10 ms later: 1 byte and 18 lines");
}

#[test]
fn bucket_refills_up_to_the_burst_only() {
    let t0 = Instant::now();
    let mut b = TokenBucket::new(RATE, t0);
    for _ in 0..20 {
        assert!(b.admit(t0, 10));
    }
    assert!(b.exhausted(t0));
    assert!(!b.is_full(ms(t0, 1000)));
    assert!(
        b.is_full(ms(t0, 2000)),
        "20 lines at 10/s, 200 bytes at 100/s"
    );
    let later = ms(t0, 60_000);
    assert_eq!(
        (0..100).filter(|_| b.admit(later, 1)).count(),
        20,
        "a quiet minute refills the burst, no more"
    );
}

/// Feeds `chunks` at `now` into fresh Lines; returns (line, continued) pairs.
fn split(chunks: &[&[u8]], rate: Rate) -> (Vec<(String, bool)>, TokenBucket, Lines) {
    let t0 = Instant::now();
    let mut b = TokenBucket::new(rate, t0);
    let mut l = Lines::default();
    let mut out = Vec::new();
    for c in chunks {
        l.feed(c, MAX_LINE, t0, &mut b, &mut |t, cont| {
            out.push((String::from_utf8_lossy(t).into_owned(), cont))
        });
    }
    (out, b, l)
}

const WIDE: Rate = Rate {
    lines_per_sec: 1_000_000,
    bytes_per_sec: 1 << 30,
    burst_lines: 1_000_000,
    burst_bytes: 1 << 30,
};

#[test]
fn lines_across_reads_crlf_and_empty_lines() {
    let (out, _, l) = split(&[b"one\ntw", b"o\r\n\n\r\nthr", b"ee"], WIDE);
    assert_eq!(
        out,
        [("one".to_string(), false), ("two".to_string(), false)]
    );
    assert!(!l.is_empty(), "\"three\" waits for its newline");
    let t = Instant::now();
    let mut l = l;
    let mut b = TokenBucket::new(WIDE, t);
    let mut got = Vec::new();
    l.flush(t, Duration::from_secs(1), &mut b, &mut |x, _| {
        got.push(x.to_vec())
    });
    assert!(got.is_empty(), "not stale yet");
    l.flush(
        t + Duration::from_secs(2),
        Duration::from_secs(1),
        &mut b,
        &mut |x, _| got.push(x.to_vec()),
    );
    assert_eq!(got, [b"three".to_vec()]);
    assert!(l.is_empty());
}

#[test]
fn long_lines_are_split_into_max_line_pieces() {
    let long = vec![b'a'; 2 * MAX_LINE + 10];
    let mut data = long.clone();
    data.extend_from_slice(b"\nnext\n");
    // In one read, and in reads of 100 bytes.
    let pieces: Vec<&[u8]> = data.chunks(100).collect();
    for chunks in [vec![&data[..]], pieces] {
        let (out, _, l) = split(&chunks, WIDE);
        let lens: Vec<(usize, bool)> = out.iter().map(|(s, c)| (s.len(), *c)).collect();
        assert_eq!(
            lens,
            [(MAX_LINE, true), (MAX_LINE, true), (10, false), (4, false)]
        );
        assert!(l.is_empty());
    }
    // An unfinished line of exactly MAX_LINE waits; one byte more cuts it.
    let (out, _, _) = split(&[&long[..MAX_LINE]], WIDE);
    assert!(out.is_empty());
    let (out, _, _) = split(&[&long[..MAX_LINE], b"b"], WIDE);
    assert_eq!(out.len(), 1);
    assert!(out[0].1);
}

#[test]
fn a_character_is_not_cut_in_two() {
    let mut data = vec![b'a'; MAX_LINE - 1];
    data.extend_from_slice("é".as_bytes()); // 2 bytes across the limit
    data.extend_from_slice(b"z\n");
    // In one read, and with the line's start already kept from an
    // earlier read.
    for chunks in [
        vec![&data[..]],
        vec![&data[..10], &data[10..]],
        data.chunks(100).collect(),
    ] {
        let (out, _, _) = split(&chunks, WIDE);
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0].0.len(), MAX_LINE - 1);
        assert_eq!(out[1].0, "éz");
    }
    assert_eq!(char_cut(&[0x80; 10], 4), 4, "garbage: cut at the limit");
}

#[test]
fn a_flood_is_dropped_in_bulk_with_counts() {
    let mut data = Vec::new();
    for i in 0..100 {
        data.extend_from_slice(format!("line {i}\n").as_bytes());
    }
    data.extend_from_slice(b"cut in the mid");
    let (out, mut b, l) = split(&[&data, b"dle of a line\nafter\n"], RATE);
    assert_eq!(out.len(), 20, "the burst");
    assert_eq!(out[19].0, "line 19");
    let (d, _) = b.take_dropped().unwrap();
    // 80 lines, the cut one, and "after" (no tokens yet either).
    assert_eq!(d.lines, 82);
    let total = data.len() + b"dle of a line\nafter\n".len();
    let logged: usize = out.iter().map(|(s, _)| s.len() + 1).sum();
    assert_eq!(d.bytes as usize, total - logged);
    assert!(l.is_empty());
}

#[test]
fn the_rest_of_a_dropped_line_is_dropped_after_a_refill() {
    let t0 = Instant::now();
    let mut b = TokenBucket::new(
        Rate {
            lines_per_sec: 1,
            bytes_per_sec: 1000,
            burst_lines: 1,
            burst_bytes: 1000,
        },
        t0,
    );
    let mut l = Lines::default();
    let mut out: Vec<Vec<u8>> = Vec::new();
    l.feed(b"first\nsecond sta", MAX_LINE, t0, &mut b, &mut |t, _| {
        out.push(t.to_vec())
    });
    l.feed(
        b"rt\nthird\n",
        MAX_LINE,
        ms(t0, 1500),
        &mut b,
        &mut |t, _| out.push(t.to_vec()),
    );
    assert_eq!(
        out,
        [b"first".to_vec(), b"third".to_vec()],
        "no tail of 'second' logged as a line of its own"
    );
}

proptest::proptest! {
    /// Any bytes, cut into reads anywhere: the same lines as in one
    /// read, none longer than MAX_LINE, none with a newline, no panic.
    #[test]
    fn lines_do_not_depend_on_read_boundaries(
        data in proptest::collection::vec(proptest::prop_oneof![proptest::num::u8::ANY, proptest::strategy::Just(b'\n')], 0..3000),
        cuts in proptest::collection::vec(0usize..3000, 0..8),
    ) {
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
        cuts.sort();
        let mut chunks = Vec::new();
        let mut at = 0;
        for c in cuts {
            chunks.push(&data[at..c]);
            at = c;
        }
        chunks.push(&data[at..]);
        let whole = split(&[&data], WIDE);
        let pieces = split(&chunks, WIDE);
        proptest::prop_assert_eq!(&whole.0, &pieces.0);
        for (line, _) in &whole.0 {
            proptest::prop_assert!(!line.contains('\n'));
        }
        let t = Instant::now();
        let mut b = TokenBucket::new(WIDE, t);
        let mut l = Lines::default();
        l.feed(&data, MAX_LINE, t, &mut b, &mut |text, _| assert!(text.len() <= MAX_LINE && !text.contains(&b'\n')));
    }
}

#[test]
fn window_close_is_idempotent() {
    let w = OutputHandle::new();
    assert!(!w.is_closed());
    let w2 = w.clone();
    w2.close();
    w2.close();
    assert!(w.is_closed());
}

#[tokio::test]
async fn window_close_wakes_a_waiter_even_if_it_came_first() {
    let w = OutputHandle::new();
    w.close();
    tokio::time::timeout(Duration::from_secs(1), w.closed())
        .await
        .unwrap();
}

/// php-fpm's flush marker ends a line as a newline does, also when it is
/// split across reads (php-src `log-bwp-msg-flush-split-*`); a NUL that
/// does not begin the marker is text, and bytes held for a marker that
/// never comes are the line's text when it is flushed.
#[test]
fn the_flush_marker_ends_a_line_even_across_reads() {
    let (out, _, l) = split(&[b"one\0fscf\0two\0fs", b"cf\0three\0fabc\n"], WIDE);
    let texts: Vec<&str> = out.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(texts, ["one", "two", "three\0fabc"]);
    assert!(l.is_empty());
    let (out, mut b, mut l) = split(&[b"four\0fs"], WIDE);
    assert!(
        out.is_empty() && !l.is_empty(),
        "waits for the marker's end"
    );
    let mut got = Vec::new();
    l.flush(Instant::now(), Duration::ZERO, &mut b, &mut |t, _| {
        got.push(String::from_utf8_lossy(t).into_owned())
    });
    assert_eq!(got, ["four\0fs"]);
    assert!(l.is_empty());
}
