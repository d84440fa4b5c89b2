//! `idemgate` itself, built inside the tests crate (see `idemgate_bin`).

fn main() -> std::process::ExitCode {
    idemgate_cli::main()
}
