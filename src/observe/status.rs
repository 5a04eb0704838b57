//! The status page (`pm.status_path`) in php-fpm 8.2's formats, field
//! for field: text (default), `?json`, `?xml`, `?html`, `?openmetrics`,
//! each with `&full` for one row per child (php-src
//! `sapi/fpm/fpm/fpm_status.c`, `fpm_status_handle_request`); and
//! fpmd's own `?live`, an HTML page that refreshes itself from `?json&full`
//! and sorts its table by any column.
//!
//! Owns: formatting a [`PoolStatus`]. Must not touch: the pool (the caller
//! samples it) or sockets.

use std::fmt::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::pool::{PoolStatus, ProcessStatus};

/// A status page format, from the query string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
    Xml,
    Html,
    OpenMetrics,
    /// fpmd's self-refreshing page.
    Live,
}

/// What the query string asks for: php-fpm looks for the keys `html`,
/// `xml`, `json`, `openmetrics` (in that order of precedence) and `full`
/// among `$_GET`, whatever their values.
pub fn parse_query(query: &[u8]) -> (Format, bool) {
    let keys: Vec<&[u8]> = query
        .split(|b| *b == b'&')
        .map(|kv| kv.split(|b| *b == b'=').next().unwrap_or_default())
        .collect();
    let has = |k: &str| keys.contains(&k.as_bytes());
    let format = if has("live") {
        Format::Live
    } else if has("html") {
        Format::Html
    } else if has("xml") {
        Format::Xml
    } else if has("json") {
        Format::Json
    } else if has("openmetrics") {
        Format::OpenMetrics
    } else {
        Format::Text
    };
    (format, has("full"))
}

/// The `Content-Type` php-fpm sends with `format` (PHP appends its
/// `default_charset` to `text/` types).
pub fn content_type(format: Format) -> &'static str {
    match format {
        Format::Text => "text/plain;charset=UTF-8",
        Format::Json => "application/json",
        Format::Xml => "text/xml;charset=UTF-8",
        Format::Html | Format::Live => "text/html;charset=UTF-8",
        Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
    }
}

fn epoch(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// php-fpm's `%d/%b/%Y:%H:%M:%S %z`, in local time.
fn clf_time(t: SystemTime) -> String {
    let dt: chrono::DateTime<chrono::Local> = t.into();
    dt.format("%d/%b/%Y:%H:%M:%S %z").to_string()
}

/// php_escape_html_entities with ENT_COMPAT | ENT_HTML_DOC_XML1.
fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() {
        "-"
    } else {
        s
    }
}

/// The request URI php-fpm shows (`-` when none).
fn uri(p: &ProcessStatus) -> &str {
    or_dash(&p.request.uri)
}

/// One field's value.
#[derive(Debug, Clone)]
enum Value {
    Int(u64),
    /// A time: CLF text in text and HTML, epoch seconds elsewhere.
    Time(SystemTime),
    Float(f64),
    Text(String),
}

/// The pool's fields, in php-fpm's order and with its (text) names.
fn pool_fields(s: &PoolStatus, now: SystemTime) -> Vec<(&'static str, Value)> {
    use Value::*;
    let since = epoch(now).saturating_sub(epoch(s.start_time));
    vec![
        ("pool", Text(s.pool.clone())),
        ("process manager", Text(s.process_manager.into())),
        ("start time", Time(s.start_time)),
        ("start since", Int(since)),
        ("accepted conn", Int(s.accepted_conn)),
        ("listen queue", Int(s.listen_queue as u64)),
        ("max listen queue", Int(s.max_listen_queue as u64)),
        ("listen queue len", Int(s.listen_queue_len.into())),
        ("idle processes", Int(s.idle as u64)),
        ("active processes", Int(s.active as u64)),
        ("total processes", Int((s.idle + s.active) as u64)),
        ("max active processes", Int(s.max_active as u64)),
        ("max children reached", Int(s.max_children_reached)),
        ("slow requests", Int(s.slow_requests)),
    ]
}

/// One child's fields (`&full`), in php-fpm's order; the text format
/// spells `request URI` so, the others `request uri`.
fn process_fields(p: &ProcessStatus, now: SystemTime) -> Vec<(&'static str, Value)> {
    use Value::*;
    vec![
        ("pid", Int(p.pid.max(0) as u64)),
        ("state", Text(p.state.into())),
        ("start time", Time(p.start_time)),
        (
            "start since",
            Int(epoch(now).saturating_sub(epoch(p.start_time))),
        ),
        ("requests", Int(p.requests.into())),
        ("request duration", Int(p.request_duration_us)),
        ("request method", Text(or_dash(&p.request.method).into())),
        ("request uri", Text(uri(p).into())),
        ("content length", Int(p.request.content_length)),
        ("user", Text(or_dash(&p.request.user).into())),
        ("script", Text(or_dash(&p.request.script).into())),
        ("last request cpu", Float(p.last_request_cpu)),
        ("last request memory", Int(p.last_request_memory)),
    ]
}

/// A value as text and HTML show it.
fn plain(v: &Value) -> String {
    match v {
        Value::Int(n) => n.to_string(),
        Value::Time(t) => clf_time(*t),
        Value::Float(f) => format!("{f:.2}"),
        Value::Text(t) => t.clone(),
    }
}

/// A value as XML shows it (times as epoch seconds, text escaped).
fn xml(v: &Value) -> String {
    match v {
        Value::Time(t) => epoch(*t).to_string(),
        Value::Text(t) => xml_escape(t),
        v => plain(v),
    }
}

fn json(v: &Value) -> serde_json::Value {
    match v {
        Value::Int(n) => (*n).into(),
        Value::Time(t) => epoch(*t).into(),
        Value::Float(f) => (*f).into(),
        Value::Text(t) => t.as_str().into(),
    }
}

fn object(fields: &[(&str, Value)]) -> serde_json::Map<String, serde_json::Value> {
    fields
        .iter()
        .map(|(k, v)| (k.to_string(), json(v)))
        .collect()
}

/// The `?json` page as a JSON object (`full`: with `processes`, each with
/// fpmd's own `generation` beyond php-fpm's fields).
pub fn json_object(
    s: &PoolStatus,
    full: bool,
    now: SystemTime,
) -> serde_json::Map<String, serde_json::Value> {
    let mut v = object(&pool_fields(s, now));
    if full {
        let procs = s.processes.iter().map(|p| {
            let mut m = object(&process_fields(p, now));
            m.insert("generation".into(), p.generation.into());
            serde_json::Value::Object(m)
        });
        v.insert("processes".into(), procs.collect());
    }
    v
}

/// The page for `s` in `format`; `now` is the time of the sample.
pub fn render(s: &PoolStatus, format: Format, full: bool, now: SystemTime) -> String {
    let fields = pool_fields(s, now);
    let rows = || s.processes.iter().map(|p| process_fields(p, now));
    let mut o = String::new();
    match format {
        Format::Text => {
            for (k, v) in &fields {
                let _ = writeln!(o, "{:<22}{}", format!("{k}:"), plain(v));
            }
            if full {
                for row in rows() {
                    o.push_str("\n************************\n");
                    for (k, v) in &row {
                        let k = if *k == "request uri" {
                            "request URI"
                        } else {
                            k
                        };
                        let _ = writeln!(o, "{:<22}{}", format!("{k}:"), plain(v));
                    }
                }
            }
        }
        Format::Json => o = serde_json::Value::Object(json_object(s, full, now)).to_string(),
        Format::Xml => {
            o.push_str("<?xml version=\"1.0\" ?>\n<status>\n");
            for (k, v) in &fields {
                let tag = k.replace(' ', "-");
                let _ = writeln!(o, "<{tag}>{}</{tag}>", xml(v));
            }
            if !full {
                o.push_str("</status>");
            } else {
                o.push_str("<processes>\n");
                for row in rows() {
                    o.push_str("<process>");
                    for (k, v) in &row {
                        let tag = k.replace(' ', "-");
                        let _ = write!(o, "<{tag}>{}</{tag}>", xml(v));
                    }
                    o.push_str("</process>\n");
                }
                o.push_str("</processes>\n</status>");
            }
        }
        Format::Html => {
            o.push_str(
                "<!DOCTYPE html PUBLIC \"-//W3C//DTD XHTML 1.0 Strict//EN\" \"http://www.w3.org/TR/xhtml1/DTD/xhtml1-strict.dtd\">\n\
                 <html xmlns=\"http://www.w3.org/1999/xhtml\" xml:lang=\"en\" lang=\"en\">\n\
                 <head><title>PHP-FPM Status Page</title></head>\n<body>\n<table>\n",
            );
            for (k, v) in &fields {
                let _ = writeln!(o, "<tr><th>{k}</th><td>{}</td></tr>", xml_escape(&plain(v)));
            }
            o.push_str("</table>\n");
            if !full {
                o.push_str("</body></html>");
            } else {
                o.push_str("<table border=\"1\">\n<tr>");
                if let Some(p) = s.processes.first() {
                    for (k, _) in process_fields(p, now) {
                        let _ = write!(o, "<th>{k}</th>");
                    }
                }
                o.push_str("</tr>\n");
                for row in rows() {
                    o.push_str("<tr>");
                    for (_, v) in &row {
                        let _ = write!(o, "<td>{}</td>", xml_escape(&plain(v)));
                    }
                    o.push_str("</tr>\n");
                }
                o.push_str("</table></body></html>");
            }
        }
        Format::OpenMetrics => {
            // php-fpm's exact text (it ignores `full` here).
            let value = |name: &str| {
                fields
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| plain(v))
                    .unwrap_or_default()
            };
            let _ = writeln!(
                o,
                "# HELP phpfpm_up Could pool {} using a {} PM on PHP-FPM be reached?\n\
                 # TYPE phpfpm_up gauge\nphpfpm_up 1",
                s.pool, s.process_manager
            );
            for (name, kind, help, field) in OPENMETRICS {
                if *name == "phpfpm_listen_queue_length" {
                    // php-fpm writes this one's TYPE before its HELP.
                    let _ = writeln!(o, "# TYPE {name} {kind}\n# HELP {name} {help}");
                } else {
                    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
                }
                let _ = writeln!(o, "{name} {}", value(field));
            }
            o.push_str("# EOF\n");
        }
        Format::Live => o.push_str(LIVE_PAGE),
    }
    o
}

/// php-fpm's OpenMetrics families of `s` at `now`, in php-fpm's order
/// (`phpfpm_up` aside): name, php-fpm's type (`counter` or `gauge`),
/// help, and the value. For the metrics endpoint, which serves the same
/// numbers as `?openmetrics`.
pub(crate) fn openmetrics_values(
    s: &PoolStatus,
    now: SystemTime,
) -> Vec<(&'static str, &'static str, &'static str, u64)> {
    let fields = pool_fields(s, now);
    OPENMETRICS
        .iter()
        .map(|(name, kind, help, field)| {
            let value = fields
                .iter()
                .find(|(k, _)| k == field)
                .and_then(|(_, v)| match v {
                    Value::Int(n) => Some(*n),
                    _ => None,
                })
                .unwrap_or(0);
            (*name, *kind, *help, value)
        })
        .collect()
}

/// php-fpm's OpenMetrics families: name, type, help, and the status field.
pub(crate) const OPENMETRICS: &[(&str, &str, &str, &str)] = &[
    ("phpfpm_start_since", "counter", "The number of seconds since FPM has started.", "start since"),
    ("phpfpm_accepted_connections", "counter", "The number of requests accepted by the pool.", "accepted conn"),
    ("phpfpm_listen_queue", "gauge", "The number of requests in the queue of pending connections.", "listen queue"),
    ("phpfpm_max_listen_queue", "counter", "The maximum number of requests in the queue of pending connections since FPM has started.", "max listen queue"),
    ("phpfpm_listen_queue_length", "gauge", "The size of the socket queue of pending connections.", "listen queue len"),
    ("phpfpm_idle_processes", "gauge", "The number of idle processes.", "idle processes"),
    ("phpfpm_active_processes", "gauge", "The number of active processes.", "active processes"),
    ("phpfpm_total_processes", "gauge", "The number of idle + active processes.", "total processes"),
    ("phpfpm_max_active_processes", "counter", "The maximum number of active processes since FPM has started.", "max active processes"),
    ("phpfpm_max_children_reached", "counter", "The number of times, the process limit has been reached, when pm tries to start more children (works only for pm 'dynamic' and 'ondemand').", "max children reached"),
    ("phpfpm_slow_requests", "counter", "The number of requests that exceeded your 'request_slowlog_timeout' value.", "slow requests"),
];

/// fpmd's live status page: polls `?json&full` every second; click a
/// column header to sort by it.
const LIVE_PAGE: &str = r##"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>fpmd status</title>
<style>
body{font:14px system-ui,sans-serif;margin:1em}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}th{cursor:pointer;background:#eee}
.Running{background:#ffe9b3}
</style></head><body>
<h1>fpmd status: <span id="pool"></span></h1>
<table id="summary"></table><h2>Children</h2><table id="procs"></table>
<script>
let sortKey = "pid", desc = false;
function esc(s){return String(s).replace(/[&<>"]/g,c=>({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]))}
async function tick(){
  try{
    const r = await fetch(location.pathname + "?json&full", {cache:"no-store"});
    const s = await r.json();
    document.getElementById("pool").textContent = s.pool;
    const procs = s.processes || []; delete s.processes;
    document.getElementById("summary").innerHTML =
      Object.entries(s).map(([k,v])=>"<tr><th>"+esc(k)+"</th><td>"+esc(v)+"</td></tr>").join("");
    const cols = procs.length ? Object.keys(procs[0]) : [];
    procs.sort((a,b)=>{const x=a[sortKey],y=b[sortKey];const c=x<y?-1:x>y?1:0;return desc?-c:c});
    document.getElementById("procs").innerHTML =
      "<tr>"+cols.map(c=>"<th data-k=\""+esc(c)+"\">"+esc(c)+(c===sortKey?(desc?" ▼":" ▲"):"")+"</th>").join("")+"</tr>"+
      procs.map(p=>"<tr class=\""+esc(p.state)+"\">"+cols.map(c=>"<td>"+esc(p[c])+"</td>").join("")+"</tr>").join("");
    document.querySelectorAll("#procs th").forEach(th=>th.onclick=()=>{
      const k=th.dataset.k; if(k===sortKey){desc=!desc}else{sortKey=k;desc=false} tick();});
  }catch(e){}
}
tick(); setInterval(tick, 1000);
</script></body></html>
"##;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::pool::RequestInfo;
    use std::time::Duration;

    /// A pool of 4 static children, one running `sleep.php`.
    pub(crate) fn sample() -> PoolStatus {
        let start = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        PoolStatus {
            pool: "www".into(),
            process_manager: "static",
            start_time: start,
            accepted_conn: 12,
            listen_queue: 4,
            max_listen_queue: 5,
            listen_queue_len: 511,
            idle: 0,
            active: 4,
            max_active: 4,
            max_children_reached: 0,
            slow_requests: 1,
            max_children: 4,
            generation: 1,
            processes: vec![ProcessStatus {
                pid: 42,
                state: "Running",
                start_time: start,
                requests: 3,
                request_duration_us: 2_500_000,
                request: RequestInfo {
                    script: "/srv/sleep.php".into(),
                    uri: "/sleep.php?ms=2500&a=<b>".into(),
                    method: "GET".into(),
                    user: String::new(),
                    content_length: 0,
                },
                generation: 1,
                slot: 0,
                last_request_memory: 0,
                last_request_cpu: 0.0,
            }],
        }
    }

    #[test]
    fn query_selects_format_as_php_fpm() {
        assert_eq!(parse_query(b""), (Format::Text, false));
        assert_eq!(parse_query(b"json&full"), (Format::Json, true));
        assert_eq!(parse_query(b"full=1&xml=1"), (Format::Xml, true));
        assert_eq!(parse_query(b"json&html"), (Format::Html, false));
        assert_eq!(parse_query(b"openmetrics"), (Format::OpenMetrics, false));
        assert_eq!(parse_query(b"fully"), (Format::Text, false));
    }

    #[test]
    fn text_and_json_have_php_fpms_fields() {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_010);
        let t = render(&sample(), Format::Text, true, now);
        assert!(t.contains("start since:          10\n"), "{t}");
        assert!(t.contains("total processes:      4\n"), "{t}");
        assert!(
            t.contains("request URI:          /sleep.php?ms=2500&a=<b>\n"),
            "{t}"
        );
        assert!(t.contains("user:                 -\n"), "{t}");
        let j: serde_json::Value =
            serde_json::from_str(&render(&sample(), Format::Json, true, now)).unwrap();
        assert_eq!(j["listen queue"], 4);
        assert_eq!(j["processes"][0]["request duration"], 2_500_000);
        assert_eq!(j["processes"][0]["state"], "Running");
        let x = render(&sample(), Format::Xml, true, now);
        assert!(
            x.contains("<request-uri>/sleep.php?ms=2500&amp;a=&lt;b&gt;</request-uri>"),
            "{x}"
        );
        assert!(x.ends_with("</processes>\n</status>"), "{x}");
        let m = render(&sample(), Format::OpenMetrics, false, now);
        assert!(
            m.contains("\nphpfpm_active_processes 4\n") && m.ends_with("# EOF\n"),
            "{m}"
        );
    }
}
