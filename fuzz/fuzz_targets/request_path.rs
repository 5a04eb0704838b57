//! The proxy's request path on arbitrary web-server bytes, through an
//! in-memory connection, against a fake child on a real unix socket pair
//! (tokio's clock paused, so timeouts cost no time).
//!
//! Properties checked for every request that reaches a child:
//! - what the child receives is one canonical request: BEGIN_REQUEST with
//!   KEEP_CONN, PARAMS records that each parse whole, at most
//!   CONTENT_LENGTH bytes of STDIN, no padding anywhere, and nothing after
//!   the empty STDIN record (no client byte can become a next request);
//! - a child connection is kept only if the child got exactly its body;
//! - nothing panics.
//!
//! Input: byte 0 chooses how the fake child answers, the rest is what the
//! web server sends (then it closes).
#![no_main]

use std::time::Duration;

use fpmd::fastcgi::{
    encode_empty, encode_end_request, encode_record, pairs, BeginRequest, Deframer, EndRequest, Piece, RecordType, KEEP_CONN,
};
use fpmd::proxy::client::{ClientConn, Next};
use fpmd::proxy::exchange::{self, Timers};
use fpmd::proxy::request::Owed;
use fpmd::proxy::verdict::{verdict, BodyEnd};
use fpmd::proxy::{script, Charge, Ctx};
use fpmd::pool::{ChildConn, Fate};
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// What the fake child saw of one request.
#[derive(Default, Debug)]
struct Seen {
    stdin: u64,
    ended: bool,
}

/// Reads one request as php-cgi would, checking that it is canonical, then
/// answers as `mode` says.
async fn child(mut s: UnixStream, mode: u8) -> Seen {
    let mut seen = Seen::default();
    let mut d = Deframer::new();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    let mut begun = false;
    let mut params_done = false;
    let mut id = 0;
    loop {
        loop {
            if d.at_boundary() && buf.len() >= 8 {
                assert_eq!(buf[0], 1, "version");
                assert_eq!(buf[6], 0, "fpmd sends no padding");
            }
            let (p, used) = d.next(&buf).expect("fpmd's records decode");
            let got = p.is_some();
            match p {
                Some(Piece::Record(r)) => {
                    assert!(!begun, "one BEGIN_REQUEST, then nothing but its streams");
                    assert_eq!(r.header.kind, RecordType::BeginRequest as u8);
                    let b = BeginRequest::decode(r.content).expect("BEGIN_REQUEST body");
                    assert_eq!(b.flags & KEEP_CONN, KEEP_CONN);
                    begun = true;
                    id = r.header.request_id;
                }
                Some(Piece::Data { kind: RecordType::Params, request_id, .. }) => {
                    // (that each record holds whole pairs is checked on the
                    // head, params_parse_record_by_record)
                    assert!(begun && !params_done && request_id == id);
                }
                Some(Piece::End { kind: RecordType::Params, .. }) => params_done = true,
                Some(Piece::Data { kind: RecordType::Stdin, request_id, data }) => {
                    assert!(params_done && !seen.ended && request_id == id);
                    seen.stdin += data.len() as u64;
                }
                Some(Piece::End { kind: RecordType::Stdin, .. }) => {
                    assert!(params_done && !seen.ended);
                    seen.ended = true;
                }
                Some(other) => panic!("unexpected record from fpmd: {other:?}"),
                None => {}
            }
            buf.drain(..used);
            if !got {
                break;
            }
        }
        if seen.ended {
            break;
        }
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let mut out = Vec::new();
    match mode % 4 {
        0 => {
            encode_record(&mut out, RecordType::Stdout, id, b"Status: 200 OK\r\n\r\nok").unwrap();
            encode_empty(&mut out, RecordType::Stdout, id);
            encode_end_request(&mut out, id, EndRequest::COMPLETE);
        }
        1 => encode_record(&mut out, RecordType::Stdout, id.wrapping_add(1), b"garbage").unwrap(),
        2 => {}
        _ => {
            // Never answers: the terminate timeout ends it (paused clock).
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
    }
    let _ = s.write_all(&out).await;
    // Anything fpmd writes after the empty STDIN record is a smuggled
    // request; give it a chance to show up.
    if seen.ended {
        let mut rest = [0u8; 64];
        if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(10), s.read(&mut rest)).await {
            assert_eq!(n, 0, "bytes after the empty STDIN record: {:?}", &rest[..n]);
        }
    }
    seen
}

/// PARAMS records in a head each hold whole pairs.
fn params_parse_record_by_record(head: &[u8]) {
    let mut rest = head;
    while let Ok(Some(r)) = fpmd::fastcgi::decode_record(rest) {
        if r.header.kind == RecordType::Params as u8 {
            assert!(pairs(r.content).all(|p| p.is_ok()), "a pair split across PARAMS records");
        }
        rest = &rest[r.header.record_len()..];
    }
}

async fn drive(mode: u8, web: Vec<u8>) {
    let (fpmd_side, mut theirs) = tokio::io::duplex(1 << 16);
    let feeder = tokio::spawn(async move {
        let _ = theirs.write_all(&web).await;
        let _ = theirs.shutdown().await;
        let mut sink = Vec::new();
        let _ = theirs.read_to_end(&mut sink).await;
    });
    let (r, w) = tokio::io::split(fpmd_side);
    let mut client = ClientConn::new(r, w, Charge::new());
    let ctx = Ctx { pool: "fuzz", peer: "fuzz", script: &script::Options::default(), access_log: false, report: fpmd::process::sapi::Report::NOTHING };
    let (_stop, mut shutdown) = tokio::sync::watch::channel(false);
    for _ in 0..8 {
        let mut req = match client.read_request(&ctx, &mut shutdown).await {
            Ok(Next::Request(req)) => req,
            Ok(Next::Answered(..)) => unreachable!("only with an access log"),
            Ok(Next::Closed) | Err(_) => break,
        };
        params_parse_record_by_record(&req.head);
        let (ours, kid_end) = std::os::unix::net::UnixStream::pair().unwrap();
        kid_end.set_nonblocking(true).unwrap();
        let kid_end = UnixStream::from_std(kid_end).unwrap();
        let (cr, cw) = fpmd::sys::stream::Stream::new(ours.into(), false).unwrap().into_split();
        let mut conn = ChildConn { reader: cr, writer: cw, buf: Default::default() };
        let kid = tokio::spawn(child(kid_end, mode));
        if conn.writer.write_all(&req.head).await.is_err() {
            break;
        }
        let timers = Timers { slowlog: Some(Duration::from_millis(500)), terminate: Some(Duration::from_secs(2)), php_messages: true, track_finished: false };
        let report = exchange::run(&mut conn, None, timers, &mut client, &mut req, None, |_| {}).await;
        let v = verdict(&report.outcome);
        drop(conn);
        let seen = kid.await.expect("the fake child's checks hold");
        if let Owed::Exact(n) = req.owed {
            assert!(seen.stdin <= n, "child got {} bytes of a {n}-byte body", seen.stdin);
        }
        if v.child == Fate::Keep {
            assert!(seen.ended, "kept a connection whose child never got the end of STDIN");
            assert!(matches!(report.outcome.body, BodyEnd::Complete | BodyEnd::Excess));
        }
        let keep = v.keep_client;
        client.recycle(req);
        if !keep {
            break;
        }
    }
    drop(client);
    let _ = feeder.await;
}

thread_local! {
    /// One runtime for all inputs (building one per input costs more than
    /// most inputs); every task an input starts ends with it.
    static RT: tokio::runtime::Runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
}

fuzz_target!(|input: &[u8]| {
    let Some((&mode, web)) = input.split_first() else { return };
    RT.with(|rt| rt.block_on(drive(mode, web.to_vec())));
});
