//! `idemgate` itself, built inside the tests crate (see `idemgate_bin`).

// The allocator of the shipped binaries (see crates/cli/src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    idemgate_cli::main()
}
