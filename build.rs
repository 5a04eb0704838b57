//! Builds fpmd's fork server (`src/process/fork_server.c`), the small
//! shared library preloaded into a pool's php-cgi parent under
//! `pm.spawn = "prefork"` (and into a parent shared by pools under
//! `"shared"`); `src/process/fork_server.rs` embeds it.
//!
//! C, not a Rust `cdylib`: it lives inside php-cgi, interposes libc's
//! `fork()`, and is ~150 lines of system calls; in C it brings no runtime or
//! allocator into every php-cgi, and it builds in this crate's own build
//! (a cdylib would be a second crate cargo cannot build as a dependency of
//! this one). The `cc` crate finds the C compiler cargo's linker already
//! needs (`CC`, cross-compilation targets).

use std::path::PathBuf;

fn main() {
    let src = "src/process/fork_server.c";
    println!("cargo:rerun-if-changed={src}");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("fpmd-fork.so");
    let compiler = cc::Build::new().pic(true).opt_level(2).get_compiler();
    let status = compiler
        .to_command()
        .args(["-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&out)
        .arg(src)
        .arg("-ldl")
        .status()
        .expect("run the C compiler for src/process/fork_server.c");
    assert!(status.success(), "building {src} failed");
}
