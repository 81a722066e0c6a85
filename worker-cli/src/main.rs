//! `share-worker`: see the library, [`worker_cli`].

/// jemalloc rather than the system's allocator: a worker allocates and frees a few small objects
/// per record on several threads, where glibc's malloc took a tenth of the CPU (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    worker_cli::main()
}
