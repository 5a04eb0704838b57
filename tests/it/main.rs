//! Integration tests: real nginx → fpmd → real php-cgi, each test in its own
//! temporary directory with its own ports (see `harness`). Run with
//! `cargo test --test it`; `make test` installs php-cgi, php-fpm, nginx,
//! dokuwiki, wordpress, mariadb-server, php-symfony-http-foundation,
//! prometheus and tmux first.

mod harness;

mod access_log;
mod apache;
mod attacks;
mod bad_fastcgi;
mod children;
mod cli;
mod config_errors;
mod debian_patterns;
mod dokuwiki;
mod drain;
mod emergency;
mod fpm_conf;
mod fuzz_live;
mod http;
mod isolation;
mod limits;
mod listen;
mod metrics;
mod output;
mod php_fpm_log;
mod pm_modes;
mod pool_settings;
mod reload;
mod sapi;
mod sapi_apps;
mod script_checks;
mod shared_parent;
mod signals;
mod socket_activation;
mod status;
mod status_cli;
mod strict;
mod systemd;
mod webservers;
