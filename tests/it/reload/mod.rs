//! Reload (issue "reload", items 1 to 12, and the failure cases C01, C02,
//! C14 and C15 of `/work/shared/cases/README.md`): SIGUSR2, `fpmd reload`
//! and `watch = true` apply a new configuration without costing a request;
//! an invalid one changes nothing and says why; listeners, removed pools,
//! `graceful_timeout`, log reopening, binary upgrade and the sd_notify
//! sequence. Everything through real nginx, under both spawn strategies.
//!
//! The reloads here mostly change `php_admin_value.memory_limit`: a new
//! ini value needs a new generation of children (both strategies), and
//! `ini.php` shows which generation answered; every php-cgi's command line
//! (`-d memory_limit=…`) shows which generation it belongs to.
//!
//! By topic: [`under_load`] (reloads under load, in bursts),
//! [`in_flight`] (requests running across a reload, `graceful_timeout`),
//! [`pools`] (one pool changed, one removed), [`invalid`] (refused
//! configurations), [`listen`] (listen sockets), [`watch`] (`watch =
//! true`), [`logs`] (log reopening), [`upgrade`] (binary upgrade),
//! [`sd_notify`]; what they share is in [`helpers`].

mod helpers;
mod in_flight;
mod invalid;
mod listen;
mod logs;
mod pools;
mod sd_notify;
mod under_load;
mod upgrade;
mod watch;
