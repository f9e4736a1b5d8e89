//! The `mcpgate` command line. `anyhow` lives here only: the library returns typed errors,
//! and this layer prints their chains and picks exit codes.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
