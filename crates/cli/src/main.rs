fn main() -> std::process::ExitCode {
    idemgate_cli::main()
}
