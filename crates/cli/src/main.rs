// mimalloc: the ledger's writer and verify allocate and free many small strings, often on
// different threads (a verify reads on one and hashes on another); glibc's malloc spent a fifth
// of their time there.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    idemgate_cli::main()
}
