//! The verdict on one exchange with a child: a pure function of what
//! happened, tested as a table.
//!
//! A child's connection is shared by every client in turn, so it is reused
//! only after a clean exchange: the child sent its END_REQUEST and consumed
//! exactly what it was sent (exactly `CONTENT_LENGTH` bytes of STDIN and the
//! empty STDIN record; php-cgi reads no more and no less, see design.md).
//! Anything else closes the connection, and the child's fate follows from
//! how it ended. Must not touch: I/O (the exchange records what happened;
//! the lease carries the verdict out).

use crate::pool::Fate;

/// How the web server's side of the exchange ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientEnd {
    /// Still connected and within the protocol.
    Open,
    /// Closed or reset its connection.
    Gone,
    /// Broke the protocol (a second BEGIN_REQUEST, an unknown record …):
    /// its connection is closed after the child is dealt with.
    Broke,
}

/// What the child got of the request body, against what it was owed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyEnd {
    /// Exactly what it was owed and the empty STDIN record.
    Complete,
    /// The same, and the web server sent more than `CONTENT_LENGTH`: fpmd
    /// dropped the excess (php-cgi would have read it as its next request).
    Excess,
    /// The web server ended its STDIN stream (or aborted the request)
    /// before `CONTENT_LENGTH` bytes: fpmd half-closed the connection, so
    /// that php-cgi reads end of input, as php-fpm's child does when the
    /// web server closes.
    Short,
    /// The web server went away in the middle of the body: half-closed
    /// likewise.
    Cut,
    /// The child stopped reading before it had everything (it ended its
    /// request early, or closed its connection).
    Unread,
}

impl BodyEnd {
    /// The child has exactly what it was owed, nothing more on its socket.
    pub fn clean(self) -> bool {
        matches!(self, BodyEnd::Complete | BodyEnd::Excess)
    }
}

/// How the child's side ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildEnd {
    /// END_REQUEST received, nothing after it.
    Ended,
    /// The connection closed before END_REQUEST (the child died, or closed
    /// its connection).
    Eof,
    /// The child broke the protocol (wrong request id or record type, bytes
    /// after END_REQUEST, a malformed record).
    Garbage,
    /// `request_terminate_timeout` passed first.
    TimedOut,
}

/// How much of the child's response reached the web server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    Nothing,
    /// Some records, not the END_REQUEST: the answer cannot be replaced.
    Partial,
    /// Everything up to and including END_REQUEST.
    Whole,
}

/// What happened in one exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub client: ClientEnd,
    pub body: BodyEnd,
    /// The body's length was not known (`CONTENT_LENGTH` negative, as Caddy
    /// sends for chunked uploads): php-cgi reads past the empty STDIN record
    /// until fpmd half-closes the connection, which cannot be reused then.
    pub until_end: bool,
    pub child: ChildEnd,
    pub sent: Sent,
    /// The web server asked to keep its connection (`FCGI_KEEP_CONN`).
    pub keep_conn: bool,
}

/// The answer fpmd gives the web server itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// The child's answer went through (or nobody is there to answer).
    None,
    /// `502 Bad Gateway`: the child died or broke the protocol before any
    /// of its answer was sent.
    BadGateway,
    /// `504 Gateway Timeout`: `request_terminate_timeout`, before any of the
    /// answer was sent.
    GatewayTimeout,
}

/// The verdict on one exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub child: Fate,
    pub reply: Reply,
    /// The web server's connection carries the next request.
    pub keep_client: bool,
}

/// Decides what becomes of the child, what the web server is told and
/// whether its connection stays open.
pub fn verdict(o: &Outcome) -> Verdict {
    let child = match o.child {
        ChildEnd::Ended if o.body.clean() && !o.until_end => Fate::Keep,
        ChildEnd::Ended => Fate::Reconnect,
        ChildEnd::Eof => Fate::Lost,
        ChildEnd::Garbage => Fate::Kill,
        ChildEnd::TimedOut => Fate::Terminate,
    };
    let reply = match (o.client, o.sent, o.child) {
        (ClientEnd::Open, Sent::Nothing, ChildEnd::Eof | ChildEnd::Garbage) => Reply::BadGateway,
        (ClientEnd::Open, Sent::Nothing, ChildEnd::TimedOut) => Reply::GatewayTimeout,
        _ => Reply::None,
    };
    let answered = o.sent == Sent::Whole || reply != Reply::None;
    let keep_client = o.client == ClientEnd::Open && o.keep_conn && answered;
    Verdict {
        child,
        reply,
        keep_client,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIENTS: [ClientEnd; 3] = [ClientEnd::Open, ClientEnd::Gone, ClientEnd::Broke];
    const BODIES: [BodyEnd; 5] = [
        BodyEnd::Complete,
        BodyEnd::Excess,
        BodyEnd::Short,
        BodyEnd::Cut,
        BodyEnd::Unread,
    ];
    const CHILDREN: [ChildEnd; 4] = [
        ChildEnd::Ended,
        ChildEnd::Eof,
        ChildEnd::Garbage,
        ChildEnd::TimedOut,
    ];
    const SENT: [Sent; 3] = [Sent::Nothing, Sent::Partial, Sent::Whole];

    fn every_outcome() -> Vec<Outcome> {
        let mut v = Vec::new();
        for client in CLIENTS {
            for body in BODIES {
                for until_end in [false, true] {
                    for child in CHILDREN {
                        for sent in SENT {
                            for keep_conn in [false, true] {
                                v.push(Outcome {
                                    client,
                                    body,
                                    until_end,
                                    child,
                                    sent,
                                    keep_conn,
                                });
                            }
                        }
                    }
                }
            }
        }
        v
    }

    /// The table: (client, body, until_end, child, sent, keep_conn) →
    /// (fate, reply, keep_client), one row per case that matters, with why.
    #[test]
    fn table() {
        use BodyEnd::*;
        use ChildEnd::*;
        use ClientEnd::*;
        use Fate::*;
        use Reply::BadGateway;
        use Sent::*;
        #[rustfmt::skip]
        type Row = (ClientEnd, BodyEnd, bool, ChildEnd, Sent, bool, Fate, Reply, bool, &'static str);
        let rows: &[Row] = &[
            // A clean exchange keeps everything.
            (
                Open,
                Complete,
                false,
                Ended,
                Whole,
                true,
                Keep,
                Reply::None,
                true,
                "the ordinary request",
            ),
            (
                Open,
                Complete,
                false,
                Ended,
                Whole,
                false,
                Keep,
                Reply::None,
                false,
                "web server did not ask for keep-alive",
            ),
            (
                Open,
                Excess,
                false,
                Ended,
                Whole,
                true,
                Keep,
                Reply::None,
                true,
                "body longer than CONTENT_LENGTH: excess dropped, child clean",
            ),
            // A body of unknown length is read to its end by php-cgi, and whether exactly: never reuse.
            (
                Open,
                Complete,
                true,
                Ended,
                Whole,
                true,
                Reconnect,
                Reply::None,
                true,
                "CONTENT_LENGTH=-1 (Caddy chunked)",
            ),
            // The child answered but its connection was half-closed or not fully read.
            (
                Open,
                Short,
                false,
                Ended,
                Whole,
                true,
                Reconnect,
                Reply::None,
                true,
                "web server's body shorter than CONTENT_LENGTH: php-cgi read end of input",
            ),
            (
                Gone,
                Cut,
                false,
                Ended,
                Nothing,
                true,
                Reconnect,
                Reply::None,
                false,
                "aborted upload: php-cgi read end of input, finished, nobody to answer",
            ),
            (
                Open,
                Unread,
                false,
                Ended,
                Whole,
                true,
                Reconnect,
                Reply::None,
                true,
                "child answered without reading the whole body",
            ),
            // The web server left after the body: the answer is drained, the child is kept.
            (
                Gone,
                Complete,
                false,
                Ended,
                Partial,
                true,
                Keep,
                Reply::None,
                false,
                "web server gone during the response",
            ),
            (
                Broke,
                Complete,
                false,
                Ended,
                Whole,
                true,
                Keep,
                Reply::None,
                false,
                "web server broke the protocol after its body",
            ),
            // The child died: 502 if nothing was sent, else the web server's connection is closed.
            (
                Open,
                Complete,
                false,
                Eof,
                Nothing,
                true,
                Lost,
                BadGateway,
                true,
                "child died before answering",
            ),
            (
                Open,
                Complete,
                false,
                Eof,
                Partial,
                true,
                Lost,
                Reply::None,
                false,
                "child died mid-answer",
            ),
            (
                Gone,
                Cut,
                false,
                Eof,
                Nothing,
                true,
                Lost,
                Reply::None,
                false,
                "child died, web server gone",
            ),
            (
                Open,
                Unread,
                false,
                Eof,
                Nothing,
                true,
                Lost,
                BadGateway,
                true,
                "child died while reading the body",
            ),
            // The child broke the protocol.
            (
                Open,
                Complete,
                false,
                Garbage,
                Nothing,
                true,
                Kill,
                BadGateway,
                true,
                "garbage before any answer",
            ),
            (
                Open,
                Complete,
                false,
                Garbage,
                Partial,
                true,
                Kill,
                Reply::None,
                false,
                "garbage mid-answer",
            ),
            // request_terminate_timeout.
            (
                Open,
                Complete,
                false,
                TimedOut,
                Nothing,
                true,
                Terminate,
                Reply::GatewayTimeout,
                true,
                "504 before any answer",
            ),
            (
                Open,
                Complete,
                false,
                TimedOut,
                Partial,
                true,
                Terminate,
                Reply::None,
                false,
                "timeout mid-answer",
            ),
            (
                Gone,
                Complete,
                false,
                TimedOut,
                Nothing,
                true,
                Terminate,
                Reply::None,
                false,
                "timeout, web server gone",
            ),
        ];
        for &(client, body, until_end, child, sent, keep_conn, fate, reply, keep_client, why) in
            rows
        {
            let o = Outcome {
                client,
                body,
                until_end,
                child,
                sent,
                keep_conn,
            };
            assert_eq!(
                verdict(&o),
                Verdict {
                    child: fate,
                    reply,
                    keep_client
                },
                "{why}: {o:?}"
            );
        }
    }

    /// Properties over every combination, including the ones the table
    /// does not name.
    #[test]
    fn every_case_is_decided_safely() {
        for o in every_outcome() {
            let v = verdict(&o);
            // A connection is reused only after a clean exchange.
            if v.child == Fate::Keep {
                assert_eq!(o.child, ChildEnd::Ended, "{o:?}");
                assert!(o.body.clean() && !o.until_end, "{o:?}");
            }
            if o.child == ChildEnd::Ended && (o.until_end || !o.body.clean()) {
                assert_eq!(v.child, Fate::Reconnect, "{o:?}");
            }
            // A child that ended its request is never signalled.
            if o.child == ChildEnd::Ended {
                assert!(matches!(v.child, Fate::Keep | Fate::Reconnect), "{o:?}");
            }
            // fpmd answers only an open web server that has seen nothing yet.
            if v.reply != Reply::None {
                assert_eq!(o.client, ClientEnd::Open, "{o:?}");
                assert_eq!(o.sent, Sent::Nothing, "{o:?}");
            }
            if o.client == ClientEnd::Open && o.sent == Sent::Nothing && o.child != ChildEnd::Ended
            {
                assert_ne!(
                    v.reply,
                    Reply::None,
                    "an open web server is always answered: {o:?}"
                );
            }
            // The web server's connection goes on only when it asked, is in
            // the protocol, and got a whole answer.
            if v.keep_client {
                assert!(o.keep_conn && o.client == ClientEnd::Open, "{o:?}");
                assert!(o.sent == Sent::Whole || v.reply != Reply::None, "{o:?}");
            }
            if o.sent == Sent::Partial {
                assert!(
                    !v.keep_client,
                    "a half-sent answer ends the connection: {o:?}"
                );
            }
        }
        assert_eq!(every_outcome().len(), 3 * 5 * 2 * 4 * 3 * 2);
    }
}
