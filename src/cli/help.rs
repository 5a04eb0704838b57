//! `fpmd help [COMMAND]` and `-h`: php-fpm's usage, or a command's help.
//!
//! Must not touch: the daemon (this only prints).

use std::process::ExitCode;

use super::{Cli, EXIT_USAGE, USAGE};

/// `fpmd help [COMMAND]`: [`USAGE`], or clap's help of the command, on
/// stdout (exit 0); an unknown command is a usage error (exit 64).
pub fn help(command: Option<&str>) -> ExitCode {
    use clap::CommandFactory;
    let Some(name) = command else {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    };
    let mut cli = Cli::command();
    // Built, so that the subcommands have the top level's settings (no
    // help flag of clap's beside their own).
    cli.build();
    match cli.find_subcommand_mut(name) {
        Some(sub) => {
            let text = sub.render_help();
            print!("{text}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("fpmd: help: no command named '{name}'");
            eprint!("{USAGE}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}
