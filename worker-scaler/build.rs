//! Compiles KEDA's External Scaler API (`proto/externalscaler.proto`) with protox, a protobuf
//! compiler in Rust: building needs no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/externalscaler.proto");
    let descriptors = protox::compile(["externalscaler.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}
