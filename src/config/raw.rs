//! The raw, unvalidated shape of a file as serde reads it (`Raw*`, with
//! `deny_unknown_fields`), and the custom visitors of its values: sizes,
//! durations, users, listen addresses, modes, client lists, ini tables.
//! Type errors are found here, with the key's path for the message.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::model::{LogFormat, LogLevel, Spawn};
use super::source::SourceFile;
use super::toml::dotted;
use super::{ConfigError, PhpFpmWords};

/// A size in bytes: PHP's ini shorthand (`"64M"`, `"1G"`, `"512K"`,
/// 1024-based, case-insensitive) or a non-negative integer of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub(super) fn parse(s: &str) -> Option<u64> {
        let s = s.trim();
        let (digits, shift) = match s.char_indices().last()? {
            (i, 'k' | 'K') => (&s[..i], 10),
            (i, 'm' | 'M') => (&s[..i], 20),
            (i, 'g' | 'G') => (&s[..i], 30),
            _ => (s, 0),
        };
        digits.trim().parse::<u64>().ok()?.checked_mul(1 << shift)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as \"64M\", \"1G\", \"512K\" or a number of bytes")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<ByteSize, E> {
                ByteSize::parse(s).map(ByteSize).ok_or_else(|| {
                    E::custom(format!(
                        "invalid size \"{s}\" (expected e.g. \"64M\", \"1G\", \"512K\")"
                    ))
                })
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(n))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<ByteSize, E> {
                u64::try_from(n)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format!("invalid size {n}: must not be negative")))
            }
        }
        d.deserialize_any(V)
    }
}

/// A duration in the configuration: a string (`"30s"`, `"5m"`, `"1h"`,
/// `"250ms"`, anything `humantime` parses) or a non-negative number of
/// seconds (`30`, `0.25`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration(pub std::time::Duration);

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Duration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"30s\", \"5m\", \"250ms\" or a number of seconds")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Duration, E> {
                humantime::parse_duration(s.trim())
                    .map(Duration)
                    .map_err(|e| E::custom(format!("invalid duration \"{s}\": {e} (expected e.g. \"30s\", \"5m\", \"1h\", \"250ms\")")))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Duration, E> {
                Ok(Duration(std::time::Duration::from_secs(n)))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Duration, E> {
                if n < 0 {
                    return Err(E::custom(format!(
                        "invalid duration {n}: must not be negative"
                    )));
                }
                self.visit_u64(n as u64)
            }
            fn visit_f64<E: de::Error>(self, x: f64) -> Result<Duration, E> {
                if !x.is_finite() || x < 0.0 {
                    return Err(E::custom(format!(
                        "invalid duration {x}: must be a finite, non-negative number of seconds"
                    )));
                }
                std::time::Duration::try_from_secs_f64(x)
                    .map(Duration)
                    .map_err(|e| E::custom(format!("invalid duration {x}: {e}")))
            }
        }
        d.deserialize_any(V)
    }
}

pub(super) struct RawFile {
    pub(super) global: Option<RawGlobal>,
    pub(super) pools: Vec<(String, RawPool)>,
}

impl<'de> Deserialize<'de> for RawFile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawFile;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a [global] table and pool tables")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawFile, A::Error> {
                let mut file = RawFile {
                    global: None,
                    pools: Vec::new(),
                };
                while let Some(key) = map.next_key::<String>()? {
                    if key == "global" {
                        file.global = Some(map.next_value()?);
                    } else {
                        let pool: RawPool = map.next_value()?;
                        file.pools.push((key, pool));
                    }
                }
                Ok(file)
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGlobal {
    pub(super) pid: Option<String>,
    pub(super) error_log: Option<String>,
    pub(super) log_level: Option<LogLevel>,
    pub(super) include: Option<StrList>,
    pub(super) emergency_restart_threshold: Option<u32>,
    pub(super) emergency_restart_interval: Option<Duration>,
    pub(super) process_control_timeout: Option<Duration>,
    pub(super) control_socket: Option<String>,
    pub(super) watch: Option<bool>,
    pub(super) daemonize: Option<bool>,
    pub(super) log_format: Option<LogFormat>,
    pub(super) log_limit: Option<i64>,
    #[serde(default)]
    pub(super) metrics: RawMetrics,
    pub(super) php_ini: Option<String>,
    pub(super) php_ini_scan_dir: Option<String>,
    pub(super) warm_min_available: Option<RawMinAvailable>,
    pub(super) warm_timeout: Option<Duration>,
    pub(super) sched_batch: Option<bool>,
}

/// `warm_min_available` as written: `"25%"`, a size (`"512M"`) or a
/// number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RawMinAvailable(pub(super) super::model::MinAvailable);

impl<'de> Deserialize<'de> for RawMinAvailable {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use super::model::MinAvailable;
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawMinAvailable;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a share of the memory such as \"25%\", a size such as \"512M\" or a number of bytes")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<RawMinAvailable, E> {
                if let Some(p) = s.trim().strip_suffix('%') {
                    return match p.trim().parse::<u8>() {
                        Ok(p) if p <= 100 => Ok(RawMinAvailable(MinAvailable::Percent(p))),
                        _ => Err(E::custom(format!(
                            "invalid share \"{s}\" (expected 0% to 100%)"
                        ))),
                    };
                }
                ByteSize::parse(s)
                    .map(|b| RawMinAvailable(MinAvailable::Bytes(b)))
                    .ok_or_else(|| {
                        E::custom(format!(
                            "invalid amount \"{s}\" (expected e.g. \"25%\", \"512M\", \"1G\")"
                        ))
                    })
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<RawMinAvailable, E> {
                Ok(RawMinAvailable(MinAvailable::Bytes(n)))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<RawMinAvailable, E> {
                u64::try_from(n)
                    .map(|n| RawMinAvailable(MinAvailable::Bytes(n)))
                    .map_err(|_| E::custom("must not be negative"))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMetrics {
    pub(super) listen: Option<RawAddress>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPool {
    pub(super) user: Option<IdOrName>,
    pub(super) group: Option<IdOrName>,
    pub(super) php_cgi: Option<String>,
    #[serde(default)]
    pub(super) listen: RawListen,
    pub(super) chdir: Option<String>,
    pub(super) clear_env: Option<bool>,
    pub(super) env: Option<BTreeMap<String, EnvValue>>,
    pub(super) php_value: Option<IniTable>,
    pub(super) php_flag: Option<IniTable>,
    pub(super) php_admin_value: Option<IniTable>,
    pub(super) php_admin_flag: Option<IniTable>,
    #[serde(default)]
    pub(super) pm: RawPm,
    pub(super) request_terminate_timeout: Option<Duration>,
    pub(super) request_slowlog_timeout: Option<Duration>,
    pub(super) slowlog: Option<String>,
    pub(super) request_queue_timeout: Option<Duration>,
    pub(super) catch_workers_output: Option<bool>,
    pub(super) decorate_workers_output: Option<bool>,
    pub(super) fpm_sapi: Option<bool>,
    pub(super) request_terminate_timeout_track_finished: Option<bool>,
    pub(super) graceful_timeout: Option<Duration>,
    pub(super) chroot: Option<String>,
    pub(super) rlimit_files: Option<u64>,
    pub(super) rlimit_core: Option<Rlimit>,
    #[serde(default)]
    pub(super) process: RawProcess,
    pub(super) no_new_privs: Option<bool>,
    #[serde(default)]
    pub(super) landlock: RawLandlock,
    #[serde(default)]
    pub(super) ping: RawPing,
    #[serde(default)]
    pub(super) access: RawAccess,
    #[serde(default)]
    pub(super) security: RawSecurity,
    #[serde(default)]
    pub(super) cgroup: RawCgroup,
    pub(super) php_ini: Option<String>,
    pub(super) php_ini_scan_dir: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCgroup {
    pub(super) memory_max: Option<ByteSize>,
    pub(super) pids_max: Option<u32>,
    pub(super) cpu_weight: Option<u32>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawListen {
    pub(super) address: Option<RawAddress>,
    pub(super) owner: Option<IdOrName>,
    pub(super) group: Option<IdOrName>,
    pub(super) mode: Option<Mode>,
    pub(super) backlog: Option<u32>,
    pub(super) allowed_clients: Option<AllowedClients>,
    pub(super) acl_users: Option<StrList>,
    pub(super) acl_groups: Option<StrList>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPm {
    pub(super) mode: Option<RawPmMode>,
    pub(super) max_children: Option<u32>,
    pub(super) max_requests: Option<u32>,
    pub(super) spawn: Option<Spawn>,
    pub(super) max_memory: Option<ByteSize>,
    pub(super) start_servers: Option<u32>,
    pub(super) min_spare_servers: Option<u32>,
    pub(super) max_spare_servers: Option<u32>,
    pub(super) max_spawn_rate: Option<u32>,
    pub(super) process_idle_timeout: Option<Duration>,
    pub(super) status_path: Option<String>,
    pub(super) status_listen: Option<RawAddress>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProcess {
    pub(super) priority: Option<i64>,
    pub(super) dumpable: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLandlock {
    pub(super) read: Option<StrList>,
    pub(super) write: Option<StrList>,
}

/// A resource limit: a number or `"unlimited"` (`u64::MAX`, as php-fpm's
/// `rlimit_core = unlimited`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Rlimit(pub(super) u64);

impl<'de> Deserialize<'de> for Rlimit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Rlimit;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number or \"unlimited\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Rlimit, E> {
                match s {
                    "unlimited" => Ok(Rlimit(u64::MAX)),
                    _ => Err(E::invalid_value(de::Unexpected::Str(s), &self)),
                }
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Rlimit, E> {
                Ok(Rlimit(n))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Rlimit, E> {
                u64::try_from(n)
                    .map(Rlimit)
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(n), &self))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPing {
    pub(super) path: Option<String>,
    pub(super) response: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAccess {
    pub(super) log: Option<String>,
    pub(super) format: Option<String>,
    pub(super) suppress_path: Option<StrList>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSecurity {
    #[allow(dead_code)] // not supported yet
    pub(super) limit_extensions: Option<StrList>,
    pub(super) pcntl: Option<bool>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub(super) enum RawPmMode {
    Static,
    Dynamic,
    Ondemand,
}

/// A string, or an array of strings.
pub(super) struct StrList(pub(super) Vec<String>);

impl<'de> Deserialize<'de> for StrList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StrList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of strings")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<StrList, E> {
                Ok(StrList(vec![s.to_string()]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<StrList, A::Error> {
                let mut v = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    v.push(s);
                }
                Ok(StrList(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// A user or group: a name, or a numeric id (as an integer or a string of digits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum IdOrName {
    Id(u32),
    Name(String),
}

impl fmt::Display for IdOrName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdOrName::Id(id) => write!(f, "{id}"),
            IdOrName::Name(n) => f.write_str(n),
        }
    }
}

impl<'de> Deserialize<'de> for IdOrName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IdOrName;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a name or a numeric id")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<IdOrName, E> {
                if s.is_empty() {
                    return Err(E::custom("empty name"));
                }
                if s.bytes().all(|b| b.is_ascii_digit()) {
                    return s
                        .parse()
                        .map(IdOrName::Id)
                        .map_err(|_| E::custom(format!("id {s} is out of range")));
                }
                Ok(IdOrName::Name(s.to_string()))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<IdOrName, E> {
                u32::try_from(n)
                    .map(IdOrName::Id)
                    .map_err(|_| E::custom(format!("id {n} is out of range")))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<IdOrName, E> {
                u32::try_from(n)
                    .map(IdOrName::Id)
                    .map_err(|_| E::custom(format!("id {n} is out of range")))
            }
        }
        d.deserialize_any(V)
    }
}

/// `listen.address` as written: a unix path (unresolved), a TCP address or
/// a bare port.
pub(super) enum RawAddress {
    Unix(String),
    Tcp(SocketAddr),
    Port(u16),
}

/// Why a `listen.address` is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum AddressError {
    /// The port is not 1 to 65535: `port` as written, in `address` when
    /// it follows a host.
    Port {
        port: String,
        address: Option<String>,
    },
    /// Any other: the whole message.
    Other(String),
}

impl fmt::Display for AddressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddressError::Port { port, address } => {
                if let Some(a) = address {
                    write!(f, "invalid listen address '{a}': ")?;
                }
                write!(f, "invalid port value '{port}' (expected 1-65535)")
            }
            AddressError::Other(m) => f.write_str(m),
        }
    }
}

impl AddressError {
    /// How php-fpm reports it (`fpm_sockets.c`, as the pool's socket is
    /// made in `fpm_init`): `invalid port value 'PORT'`. `None` for the
    /// others, whose php-fpm words (if it refuses them) fpmd does not copy.
    pub(super) fn php_fpm(&self) -> Option<PhpFpmWords> {
        match self {
            AddressError::Port { port, .. } => {
                Some(PhpFpmWords::init(format!("invalid port value '{port}'")))
            }
            AddressError::Other(_) => None,
        }
    }
}

fn parse_port(s: &str, address: Option<&str>) -> Result<u16, AddressError> {
    match s.parse::<u16>() {
        Ok(0) | Err(_) => Err(AddressError::Port {
            port: s.to_string(),
            address: address.map(str::to_string),
        }),
        Ok(p) => Ok(p),
    }
}

pub(super) fn parse_listen_address(s: &str) -> Result<RawAddress, AddressError> {
    const FORMS: &str =
        "expected a unix socket path (containing '/'), \"IP:PORT\", \"[IPv6]:PORT\" or a port";
    if s.is_empty() {
        return Err(AddressError::Other(format!(
            "empty listen address ({FORMS})"
        )));
    }
    if s.contains('/') {
        return Ok(RawAddress::Unix(s.to_string()));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return parse_port(s, None).map(RawAddress::Port);
    }
    if let Ok(addr) = s.parse::<SocketAddr>() {
        if addr.port() == 0 {
            return Err(AddressError::Other(format!(
                "invalid listen address '{s}': port 0 is not allowed"
            )));
        }
        return Ok(RawAddress::Tcp(addr));
    }
    if let Some((host, port)) = s.rsplit_once(':') {
        let ip = match host {
            "*" => Some(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            "localhost" => Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            // An address with a port that is not one: said so below.
            _ => host.parse::<Ipv4Addr>().ok().map(IpAddr::V4).or_else(|| {
                let v6 = host.strip_prefix('[')?.strip_suffix(']')?;
                v6.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6)
            }),
        };
        if let Some(ip) = ip {
            let port = parse_port(port, Some(s))?;
            return Ok(RawAddress::Tcp(SocketAddr::new(ip, port)));
        }
    }
    Err(AddressError::Other(format!(
        "invalid listen address '{s}' ({FORMS})"
    )))
}

impl<'de> Deserialize<'de> for RawAddress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawAddress;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a unix socket path, \"IP:PORT\", \"[IPv6]:PORT\" or a port number")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<RawAddress, E> {
                parse_listen_address(s).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<RawAddress, E> {
                self.visit_str(&n.to_string())
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<RawAddress, E> {
                self.visit_str(&n.to_string())
            }
        }
        d.deserialize_any(V)
    }
}

/// `listen.mode`: an octal string ≤ 0777.
pub(super) struct Mode(pub(super) u32);

pub(super) fn parse_mode(s: &str) -> Result<u32, String> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return Err(format!(
            "invalid mode \"{s}\": expected an octal string such as \"0660\""
        ));
    }
    match u32::from_str_radix(digits, 8) {
        Ok(m) if m <= 0o777 => Ok(m),
        _ => Err(format!("invalid mode \"{s}\": must be at most \"0777\"")),
    }
}

impl<'de> Deserialize<'de> for Mode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Mode;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an octal mode string such as \"0660\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Mode, E> {
                parse_mode(s).map(Mode).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// `listen.allowed_clients`: an array of IP strings or one comma-separated string.
pub(super) struct AllowedClients(pub(super) Vec<IpAddr>);

fn parse_ip<E: de::Error>(s: &str) -> Result<IpAddr, E> {
    s.trim()
        .parse()
        .map_err(|_| E::custom(format!("invalid IP address '{}'", s.trim())))
}

impl<'de> Deserialize<'de> for AllowedClients {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AllowedClients;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of IP addresses or a comma-separated string of them")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<AllowedClients, E> {
                s.split(',')
                    .filter(|p| !p.trim().is_empty())
                    .map(parse_ip)
                    .collect::<Result<_, _>>()
                    .map(AllowedClients)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<AllowedClients, A::Error> {
                let mut v = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    v.push(parse_ip(&s)?);
                }
                Ok(AllowedClients(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// An `env.*` value: a string (or a number, taken as written).
pub(super) struct EnvValue(pub(super) String);

impl<'de> Deserialize<'de> for EnvValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = EnvValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<EnvValue, E> {
                Ok(EnvValue(s.to_string()))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<EnvValue, E> {
                Ok(EnvValue(n.to_string()))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<EnvValue, E> {
                Ok(EnvValue(n.to_string()))
            }
            fn visit_f64<E: de::Error>(self, x: f64) -> Result<EnvValue, E> {
                Ok(EnvValue(x.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A scalar ini value as written in TOML.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum IniScalar {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

pub(super) enum IniNode {
    Scalar(IniScalar),
    Table(Vec<(String, IniNode)>),
}

/// TOML's private datetime wrapper key (toml 0.8 deserializes a datetime
/// as a one-entry map with this key).
const TOML_DATETIME_KEY: &str = "$__toml_private_datetime";

impl<'de> Deserialize<'de> for IniNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IniNode;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, number or boolean")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<IniNode, E> {
                Ok(IniNode::Scalar(IniScalar::Str(s.to_string())))
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<IniNode, E> {
                Ok(IniNode::Scalar(IniScalar::Bool(b)))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<IniNode, E> {
                Ok(IniNode::Scalar(IniScalar::Int(n)))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<IniNode, E> {
                Ok(IniNode::Scalar(match i64::try_from(n) {
                    Ok(i) => IniScalar::Int(i),
                    Err(_) => IniScalar::Str(n.to_string()),
                }))
            }
            fn visit_f64<E: de::Error>(self, x: f64) -> Result<IniNode, E> {
                Ok(IniNode::Scalar(IniScalar::Float(x)))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<IniNode, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if key == TOML_DATETIME_KEY {
                        let s: String = map.next_value()?;
                        return Ok(IniNode::Scalar(IniScalar::Str(s)));
                    }
                    entries.push((key, map.next_value()?));
                }
                Ok(IniNode::Table(entries))
            }
        }
        d.deserialize_any(V)
    }
}

/// A `php_*` table, flattened: (key segments, value); the ini name is the
/// segments joined with dots.
pub(super) struct IniTable(pub(super) Vec<(Vec<String>, IniScalar)>);

impl<'de> Deserialize<'de> for IniTable {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        fn flatten(
            prefix: &mut Vec<String>,
            node: IniNode,
            out: &mut Vec<(Vec<String>, IniScalar)>,
        ) {
            match node {
                IniNode::Scalar(v) => out.push((prefix.clone(), v)),
                IniNode::Table(entries) => {
                    for (k, sub) in entries {
                        prefix.push(k);
                        flatten(prefix, sub, out);
                        prefix.pop();
                    }
                }
            }
        }
        let mut entries = Vec::new();
        match IniNode::deserialize(d)? {
            IniNode::Scalar(_) => {
                return Err(de::Error::custom(
                    "expected a table of ini settings, e.g. php_value.memory_limit = \"128M\"",
                ))
            }
            node => flatten(&mut Vec::new(), node, &mut entries),
        }
        Ok(IniTable(entries))
    }
}

pub(super) fn deserialize_file(src: &SourceFile) -> Result<RawFile, ConfigError> {
    let de = toml::Deserializer::new(src.text());
    serde_path_to_error::deserialize::<_, RawFile>(de).map_err(|e| {
        let mut segs: Vec<String> = Vec::new();
        for seg in e.path().iter() {
            if let serde_path_to_error::Segment::Map { key } = seg {
                segs.push(key.clone());
            }
        }
        let inner = e.into_inner();
        let refs: Vec<&str> = segs.iter().map(|s| s.as_str()).collect();
        let line = inner
            .span()
            .map(|s| src.line_at(s.start))
            .or_else(|| src.find_line(&refs))
            .or_else(|| refs.first().and_then(|f| src.find_line(&[f])));
        let message = inner.message().trim().replace('\n', "; ");
        let (pool, key) = match segs.split_first() {
            Some((first, rest)) if first == "global" => {
                (None, Some(dotted(&segs)).filter(|_| !rest.is_empty()))
            }
            Some((first, rest)) => (
                Some(first.clone()),
                Some(dotted(rest)).filter(|_| !rest.is_empty()),
            ),
            None => (None, None),
        };
        ConfigError {
            file: src.path.clone(),
            line,
            pool,
            key,
            message,
            php_fpm: listen_address_words(src, &refs).map(Box::new),
        }
    })
}

/// php-fpm's words for a pool's `listen.address` at `segs` (`[POOL,
/// "listen", "address"]`, the path of a value that failed to
/// deserialize), asked of the parser that refused it; `None` for any
/// other path, or words php-fpm does not share.
fn listen_address_words(src: &SourceFile, segs: &[&str]) -> Option<PhpFpmWords> {
    let [pool, "listen", "address"] = segs else {
        return None;
    };
    if *pool == "global" {
        return None;
    }
    let written = src.value_text(segs)?;
    parse_listen_address(&written).err()?.php_fpm()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testutil::*;
    use crate::config::ListenAddress;

    #[test]
    fn listen_address_forms() {
        let tcp = |s: &str| match parse_listen_address(s) {
            Ok(RawAddress::Tcp(a)) => a,
            Ok(RawAddress::Port(p)) => panic!("{s}: bare port {p}"),
            Ok(RawAddress::Unix(p)) => panic!("{s}: unix {p}"),
            Err(e) => panic!("{s}: {e}"),
        };
        assert_eq!(tcp("127.0.0.1:9000"), "127.0.0.1:9000".parse().unwrap());
        assert_eq!(tcp("[::1]:9000"), "[::1]:9000".parse().unwrap());
        assert_eq!(tcp("[::]:9000"), "[::]:9000".parse().unwrap());
        assert!(
            matches!(parse_listen_address("9000"), Ok(RawAddress::Port(9000))),
            "a bare port is php-fpm's implicit address"
        );
        assert_eq!(tcp("*:9000"), "0.0.0.0:9000".parse().unwrap());
        assert_eq!(tcp("localhost:9000"), "127.0.0.1:9000".parse().unwrap());
        assert!(
            matches!(parse_listen_address("/tmp/www.sock"), Ok(RawAddress::Unix(p)) if p == "/tmp/www.sock")
        );
        assert!(matches!(
            parse_listen_address("./www.sock"),
            Ok(RawAddress::Unix(_))
        ));
        for bad in [
            "",
            "www.sock",
            "::1:9000",
            "127.0.0.1:0",
            "0",
            "70000",
            "127.0.0.1:x",
            "example.com:80",
            "localhost:",
        ] {
            assert!(
                parse_listen_address(bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
        assert_eq!(
            ListenAddress::Tcp("[::1]:9000".parse().unwrap()).to_string(),
            "[::1]:9000"
        );
        assert_eq!(
            ListenAddress::Tcp("127.0.0.1:9000".parse().unwrap()).to_string(),
            "127.0.0.1:9000"
        );
        assert_eq!(
            ListenAddress::Unix("/run/x.sock".into()).to_string(),
            "/run/x.sock"
        );
        assert_eq!(ListenAddress::Port(9000).to_string(), "9000");

        // Through files: every form, including an integer and a relative path.
        let cases: &[(&str, ListenAddress)] = &[
            ("9000", ListenAddress::Port(9000)),
            ("\"9001\"", ListenAddress::Port(9001)),
            (
                "\"10.1.2.3:9002\"",
                ListenAddress::Tcp("10.1.2.3:9002".parse().unwrap()),
            ),
            (
                "\"[::1]:9003\"",
                ListenAddress::Tcp("[::1]:9003".parse().unwrap()),
            ),
            (
                "\"/tmp/www.sock\"",
                ListenAddress::Unix("/tmp/www.sock".into()),
            ),
        ];
        for (value, expected) in cases {
            let text = format!("[www]\nuser = \"nobody\"\nphp_cgi = \"/bin/sh\"\nlisten.address = {value}\npm.max_children = 1\n");
            let (_dir, c) = load_ok(&text, &[]);
            assert_eq!(&c.pools[0].listen.address, expected, "{value}");
        }
        let (dir, c) = load_ok(
            &pool("www", "").replace("/tmp/www.sock", "./sock/../www.sock"),
            &[("sock/.keep", "")],
        );
        assert_eq!(
            c.pools[0].listen.address,
            ListenAddress::Unix(dir.path().join("sock/../www.sock"))
        );
    }

    #[derive(Deserialize)]
    struct D {
        d: Duration,
    }

    fn dur(v: &str) -> Result<std::time::Duration, String> {
        toml::from_str::<D>(&format!("d = {v}"))
            .map(|d| d.d.0)
            .map_err(|e| e.message().to_string())
    }

    #[test]
    fn durations() {
        use std::time::Duration as D;
        assert_eq!(dur("\"30s\""), Ok(D::from_secs(30)));
        assert_eq!(dur("\"5m\""), Ok(D::from_secs(300)));
        assert_eq!(dur("\"1h\""), Ok(D::from_secs(3600)));
        assert_eq!(dur("\"250ms\""), Ok(D::from_millis(250)));
        assert_eq!(dur("\"1m 30s\""), Ok(D::from_secs(90)));
        assert_eq!(dur("30"), Ok(D::from_secs(30)));
        assert_eq!(dur("0"), Ok(D::ZERO));
        assert_eq!(dur("0.25"), Ok(D::from_millis(250)));
        assert_eq!(
            dur("-1"),
            Err("invalid duration -1: must not be negative".into())
        );
        assert!(dur("-0.5").unwrap_err().contains("non-negative"));
        assert!(dur("nan").is_err() && dur("inf").is_err());
        assert!(dur("\"10 parsecs\"")
            .unwrap_err()
            .starts_with("invalid duration \"10 parsecs\""));
        assert!(dur("\"\"").is_err());
        assert!(dur("true")
            .unwrap_err()
            .starts_with("invalid type: boolean `true`"));
        assert_eq!(Duration(D::from_secs(90)).to_string(), "1m 30s");
    }

    #[test]
    fn wrong_type() {
        let www = "[www]\nuser = \"nobody\"\ngroup = \"nogroup\"\nphp_cgi = \"/bin/sh\"\nlisten.address = \"/run/www.sock\"\n\n\npm.max_children = \"five\"\n";
        let (dir, e) = load_err(INCLUDE_MAIN, &[("pool.d/www.toml", www)]);
        assert_err(
            &dir,
            &e,
            "pool.d/www.toml",
            Some(8),
            Some("www"),
            Some("pm.max_children"),
            "invalid type: string \"five\", expected u32",
        );
        for (extra, key, msg) in [
            ("clear_env = \"yes\"", "clear_env", "invalid type: string \"yes\", expected a boolean"),
            ("pm.max_requests = -1", "pm.max_requests", "invalid value: integer `-1`, expected u32"),
            ("request_terminate_timeout = \"10 parsecs\"", "request_terminate_timeout", "invalid duration \"10 parsecs\": unknown time unit \"parsecs\", supported units: ns, us/µs, ms, sec, min, hours, days, weeks, months, years (and few variations) (expected e.g. \"30s\", \"5m\", \"1h\", \"250ms\")"),
            ("pm.mode = \"fixed\"", "pm.mode", "unknown variant `fixed`, expected one of `static`, `dynamic`, `ondemand`"),
            ("user = -3", "user", "id -3 is out of range"),
        ] {
            let text = pool("www", &format!("{extra}\n"));
            // A key already in the fixture is replaced so that TOML does not see a duplicate.
            let text = if extra.starts_with("user") { text.replacen("user = \"nobody\"\n", "", 1) } else { text };
            let line = if extra.starts_with("user") { 6 } else { 7 };
            let (dir, e) = load_err(&text, &[]);
            assert_err(&dir, &e, "fpmd.toml", Some(line), Some("www"), Some(key), msg);
        }
        let (dir, e) = load_err("[global]\nlog_level = \"verbose\"\n", &[]);
        assert_err(&dir, &e, "fpmd.toml", Some(2), None, Some("global.log_level"), "unknown variant `verbose`, expected one of `alert`, `error`, `warning`, `notice`, `debug`");
        let (dir, e) = load_err("[global]\ninclude = 3\n", &[]);
        assert_err(
            &dir,
            &e,
            "fpmd.toml",
            Some(2),
            None,
            Some("global.include"),
            "invalid type: integer `3`, expected a string or an array of strings",
        );
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

            #[test]
            fn mode_round_trips(m in 0u32..=0o777) {
                prop_assert_eq!(parse_mode(&format!("{m:04o}")), Ok(m));
                prop_assert_eq!(parse_mode(&format!("{m:o}")), Ok(m));
            }

            #[test]
            fn integer_seconds(n in 0u32..10_000_000) {
                prop_assert_eq!(dur(&n.to_string()), Ok(std::time::Duration::from_secs(n.into())));
                prop_assert_eq!(dur(&format!("\"{n}s\"")), Ok(std::time::Duration::from_secs(n.into())));
            }

            #[test]
            fn tcp_addresses(a in any::<[u8; 4]>(), port in 1u16..) {
                let ip = Ipv4Addr::from(a);
                let ok = matches!(parse_listen_address(&format!("{ip}:{port}")), Ok(RawAddress::Tcp(s)) if s == SocketAddr::new(ip.into(), port));
                prop_assert!(ok);
                let ok = matches!(parse_listen_address(&port.to_string()), Ok(RawAddress::Port(p)) if p == port);
                prop_assert!(ok);
            }
        }
    }
}
