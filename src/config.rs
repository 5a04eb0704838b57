//! TEMPORARY stand-in for the configuration module (being written); same API.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct ConfigError { pub file: PathBuf, pub line: Option<usize>, pub key: Option<String>, pub message: String }
impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { write!(f, "{}: {}", self.file.display(), self.message) }
}
#[derive(Debug, Clone)]
pub struct Config { pub file: PathBuf, pub global: Global, pub pools: Vec<PoolConfig> }
impl Config { pub fn to_toml(&self) -> String { format!("{:#?}\n", self) } }
#[derive(Debug, Clone)]
pub struct Global { pub pid: Option<PathBuf>, pub error_log: LogTarget, pub log_level: LogLevel }
#[derive(Debug, Clone)]
pub enum LogTarget { Stderr, File(PathBuf) }
#[derive(Debug, Clone)]
pub enum LogLevel { Alert, Error, Warning, Notice, Debug }
#[derive(Debug, Clone)]
pub struct PoolConfig {
    pub name: String, pub file: PathBuf, pub user: Credentials, pub php_cgi: PathBuf, pub listen: Listen,
    pub chdir: PathBuf, pub clear_env: bool, pub env: BTreeMap<String, String>,
    pub php_values: BTreeMap<String, String>, pub php_admin_values: BTreeMap<String, String>, pub pm: ProcessManager,
}
impl PoolConfig {
    pub fn ini_args(&self) -> Vec<String> {
        let mut m = self.php_values.clone();
        m.extend(self.php_admin_values.clone());
        m.into_iter().flat_map(|(k, v)| ["-d".to_string(), format!("{k}={v}")]).collect()
    }
}
#[derive(Debug, Clone)]
pub struct Credentials { pub user_name: String, pub uid: u32, pub gid: u32, pub group_name: String, pub groups: Vec<u32> }
#[derive(Debug, Clone)]
pub struct Listen { pub address: ListenAddress, pub owner: Option<u32>, pub group: Option<u32>, pub mode: u32, pub backlog: u32, pub allowed_clients: Option<Vec<std::net::IpAddr>> }
#[derive(Debug, Clone, PartialEq)]
pub enum ListenAddress { Unix(PathBuf), Tcp(std::net::SocketAddr) }
impl std::fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self { ListenAddress::Unix(p) => write!(f, "{}", p.display()), ListenAddress::Tcp(a) => write!(f, "{a}") }
    }
}
#[derive(Debug, Clone)]
pub struct ProcessManager { pub mode: PmMode, pub max_children: u32, pub max_requests: u32 }
#[derive(Debug, Clone)]
pub enum PmMode { Static }
pub fn find_default_config() -> Option<PathBuf> { None }
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let err = |m: String| ConfigError { file: path.to_path_buf(), line: None, key: None, message: m };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let v: toml::Table = text.parse().map_err(|e: toml::de::Error| err(e.to_string()))?;
    let mut pools = Vec::new();
    for (name, t) in v.iter().filter(|(k, _)| *k != "global") {
        let t = t.as_table().unwrap();
        let s = |k: &str| t.get(k).and_then(|v| v.as_str()).map(String::from);
        let sub = |a: &str, b: &str| t.get(a).and_then(|v| v.get(b)).cloned();
        let user = nix::unistd::User::from_name(&s("user").unwrap_or("www-data".into())).unwrap().unwrap();
        let addr = sub("listen", "address").unwrap().as_str().unwrap().to_string();
        let address = if addr.contains('/') { ListenAddress::Unix(addr.into()) } else { ListenAddress::Tcp(addr.parse().unwrap()) };
        let strmap = |k: &str| t.get(k).and_then(|v| v.as_table()).map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().map(String::from).unwrap_or(v.to_string()))).collect()).unwrap_or_default();
        pools.push(PoolConfig {
            name: name.clone(), file: path.into(),
            user: Credentials { user_name: user.name.clone(), uid: user.uid.as_raw(), gid: user.gid.as_raw(), group_name: String::new(), groups: vec![user.gid.as_raw()] },
            php_cgi: s("php_cgi").unwrap_or("/usr/bin/php-cgi".into()).into(),
            listen: Listen { address, owner: None, group: None, mode: 0o660, backlog: 511, allowed_clients: None },
            chdir: "/".into(), clear_env: true, env: strmap("env"), php_values: strmap("php_value"), php_admin_values: strmap("php_admin_value"),
            pm: ProcessManager { mode: PmMode::Static,
                max_children: sub("pm", "max_children").and_then(|v| v.as_integer()).unwrap_or(4) as u32,
                max_requests: sub("pm", "max_requests").and_then(|v| v.as_integer()).unwrap_or(0) as u32 },
        });
    }
    Ok(Config { file: path.into(), global: Global { pid: None, error_log: LogTarget::Stderr, log_level: LogLevel::Debug }, pools })
}
