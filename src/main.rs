//! The `mcpgate` command line. `anyhow` lives here only: the library returns typed errors,
//! and this layer prints their chains and picks exit codes.

mod cli;

/// mimalloc rather than the system allocator: a tool call through the gateway allocates about
/// two hundred times, and mimalloc takes about half the instructions of glibc's malloc per
/// allocation and free (BENCHMARKS.md). The library leaves the choice to its embedders.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
