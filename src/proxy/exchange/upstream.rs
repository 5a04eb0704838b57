//! The web server's half of an exchange: its records after the head, read
//! and checked, the body forwarded to the child as canonical STDIN records
//! (at most `CONTENT_LENGTH` of it, then the empty STDIN record), and the
//! child's input half-closed when the web server stops short of that.
//! Management records are answered; anything else breaks the protocol.

use std::io::{self, IoSlice};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::write_all_vectored;
use crate::fastcgi::{self, Deframer, Header, Piece, RecordType, NULL_REQUEST_ID};
use crate::proxy::client::{management, ClientError};
use crate::proxy::request::{Owed, Request};
use crate::sys::stream::WriteHalf;

/// Bytes a web server may send once its STDIN has ended and its request is
/// in flight (management records only; with `FCGI_MPXS_CONNS` = 0 a web
/// server sends nothing then) before its connection is judged broken.
const MAX_IN_FLIGHT_EXTRA: usize = 64 * 1024;

/// Why the pump from the web server to the child stopped.
pub(super) enum UpEnd {
    /// The web server closed its connection after the child had its body.
    Gone,
    /// The web server closed in the middle of the body: half-closed.
    Cut,
    /// The web server ended its STDIN (or aborted) short of
    /// `CONTENT_LENGTH`: half-closed.
    Short,
    /// The web server broke the protocol (half-closed if the body was not
    /// complete).
    Broke(ClientError),
    /// Writing to the child failed: it closed its connection.
    ChildGone,
}

/// The web server's half of the exchange: its records after the head,
/// checked, and the body forwarded to the child as STDIN records.
pub(super) struct Upstream<'a, R> {
    pub(super) id: u16,
    pub(super) reader: &'a mut R,
    /// Bytes read from the web server and not yet consumed.
    pub(super) buf: &'a mut BytesMut,
    pub(super) deframer: &'a mut Deframer,
    /// Management replies owed to the web server.
    pub(super) replies: &'a mut Vec<u8>,
    pub(super) child_w: &'a mut WriteHalf,
    pub(super) req: &'a mut Request,
    /// Bytes of records since the web server's STDIN ended (at most
    /// [`MAX_IN_FLIGHT_EXTRA`]).
    pub(super) extra: usize,
}

impl<R: AsyncRead + Unpin> Upstream<'_, R> {
    /// Reads the web server's records until its side ends: the body to the
    /// child, management records answered, anything else a fault.
    pub(super) async fn pump(mut self) -> UpEnd {
        if self.req.owed == Owed::UntilEnd && self.req.child_stdin_ended {
            // A negative CONTENT_LENGTH: php-cgi reads past the empty STDIN
            // record and would wait for more; end its input (as php-fpm's
            // child sees the web server close).
            let _ = self.child_w.shutdown().await;
        }
        if self.req.client_stdin_done && !self.req.child_stdin_ended {
            // The body ended short of CONTENT_LENGTH before dispatch.
            return self.ended_short().await;
        }
        loop {
            if let Some(end) = self.take_buffered().await {
                return end;
            }
            if self.extra > MAX_IN_FLIGHT_EXTRA {
                let e = ClientError::TooMuchInFlight { id: self.id };
                return self.half_close(UpEnd::Broke(e)).await;
            }
            if self.buf.capacity() - self.buf.len() < 1024 {
                self.buf.reserve(16 * 1024);
            }
            match self.reader.read_buf(self.buf).await {
                Ok(0) | Err(_) => {
                    if self.req.child_stdin_ended {
                        return UpEnd::Gone;
                    }
                    return self.half_close(UpEnd::Cut).await;
                }
                Ok(_) => {}
            }
        }
    }

    /// Takes every piece whole in the buffer; `Some` when the pump ends.
    async fn take_buffered(&mut self) -> Option<UpEnd> {
        let id = self.id;
        loop {
            let (piece, used) = match self.deframer.next(self.buf) {
                Ok(x) => x,
                Err(e) => return Some(self.half_close(UpEnd::Broke(e.into())).await),
            };
            let Some(piece) = piece else {
                self.buf.advance(used);
                return None;
            };
            if self.req.client_stdin_done {
                self.extra += used;
            }
            match piece {
                Piece::Data {
                    kind: RecordType::Stdin,
                    request_id,
                    data,
                } if request_id == id && !self.req.client_stdin_done => {
                    if forward_stdin(self.child_w, self.req, id, data)
                        .await
                        .is_err()
                    {
                        self.buf.advance(used);
                        return Some(UpEnd::ChildGone);
                    }
                }
                Piece::End {
                    kind: RecordType::Stdin,
                    request_id,
                } if request_id == id && !self.req.client_stdin_done => {
                    self.req.client_stdin_done = true;
                    if !self.req.child_stdin_ended {
                        self.buf.advance(used);
                        if self.req.owed != Owed::UntilEnd {
                            return Some(self.ended_short().await);
                        }
                        self.req.child_stdin_ended = true;
                        let end = self.req.stdin_end_record();
                        if self.child_w.write_all(&end).await.is_err() {
                            return Some(UpEnd::ChildGone);
                        }
                        // php-cgi reads past it (see above): end its
                        // input.
                        let _ = self.child_w.shutdown().await;
                        continue;
                    }
                }
                Piece::Record(r)
                    if r.header.request_id == NULL_REQUEST_ID
                        && r.header.kind != RecordType::BeginRequest as u8 =>
                {
                    if let Err(e) = management(self.replies, r) {
                        self.buf.advance(used);
                        return Some(self.half_close(UpEnd::Broke(e)).await);
                    }
                }
                Piece::Record(r)
                    if r.header.kind == RecordType::AbortRequest as u8
                        && r.header.request_id == id =>
                {
                    // php-cgi cannot be interrupted: the response still
                    // ends with END_REQUEST. Mid-body, the child reads
                    // end of input (php-fpm's child sees the same).
                    self.buf.advance(used);
                    if !self.req.child_stdin_ended {
                        return Some(self.half_close(UpEnd::Short).await);
                    }
                    continue;
                }
                other => {
                    let e = refusal(other, self.req);
                    self.buf.advance(used);
                    return Some(self.half_close(UpEnd::Broke(e)).await);
                }
            }
            self.buf.advance(used);
        }
    }

    /// The web server ended its STDIN short of `CONTENT_LENGTH`: the child
    /// gets the empty STDIN record, as php-fpm's child gets the web
    /// server's (php-cgi's `fcgi_read` then returns what it read; at end
    /// of input alone it returns 0 and the script loses the last bytes),
    /// and end of input after it (it would wait for the rest of
    /// `CONTENT_LENGTH`).
    async fn ended_short(&mut self) -> UpEnd {
        let end = self.req.stdin_end_record();
        let _ = self.child_w.write_all(&end).await;
        self.half_close(UpEnd::Short).await
    }

    /// Ends the child's input by closing fpmd's writing side of the
    /// connection (`shutdown(SHUT_WR)`), unless the child already has its
    /// whole body: php-cgi then reads end of input and finishes its
    /// request.
    async fn half_close(&mut self, end: UpEnd) -> UpEnd {
        if !self.req.child_stdin_ended {
            let _ = self.child_w.shutdown().await;
        }
        end
    }
}

/// Forwards a STDIN record's `data` to the child, as far as the body is
/// owed (the rest counts as excess), with the empty STDIN record when that
/// ends it: one `writev` of a fresh header, the content and the end.
/// Errors: the write failed (the child closed its connection).
async fn forward_stdin(
    child_w: &mut WriteHalf,
    req: &mut Request,
    id: u16,
    data: &[u8],
) -> io::Result<()> {
    let take = req.remaining().min(data.len() as u64) as usize;
    req.excess += (data.len() - take) as u64;
    if take > 0 {
        let hdr = Header::new(RecordType::Stdin, id, take as u16).encode();
        let end = req.stdin_end_record();
        let ended = req.sent_body(take as u64);
        let mut io = [
            IoSlice::new(&hdr),
            IoSlice::new(&data[..take]),
            IoSlice::new(if ended { &end } else { &[] }),
        ];
        write_all_vectored(child_w, &mut io).await?;
    }
    Ok(())
}

/// Why a piece the exchange does not take breaks the protocol.
fn refusal(piece: Piece<'_>, req: &Request) -> ClientError {
    match piece {
        Piece::Record(r) if r.header.kind == RecordType::BeginRequest as u8 => {
            ClientError::SecondBegin {
                new: r.header.request_id,
                busy: req.id,
            }
        }
        Piece::Record(r) if r.header.record_type().is_none() => ClientError::UnknownType {
            kind: r.header.kind,
            id: r.header.request_id,
        },
        Piece::Record(r) => unexpected(r.header.kind, r.header.request_id, req),
        Piece::Data {
            kind, request_id, ..
        }
        | Piece::End { kind, request_id } => unexpected(kind as u8, request_id, req),
    }
}

fn unexpected(kind: u8, request_id: u16, req: &Request) -> ClientError {
    let state = if req.client_stdin_done {
        "request in flight"
    } else {
        "reading STDIN"
    };
    ClientError::Unexpected {
        kind: fastcgi::type_name(kind),
        id: request_id,
        state,
    }
}
