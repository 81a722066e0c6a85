//! `share-worker`: see the library, [`worker_cli`].

fn main() -> std::process::ExitCode {
    worker_cli::main()
}
