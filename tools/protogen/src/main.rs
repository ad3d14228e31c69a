//! `cargo run -p skiff-protogen`: regenerates control/src/http/k8s-descriptors.bin from the
//! k8s-pb crate the workspace depends on.

fn main() -> anyhow::Result<()> {
    let root = skiff_protogen::workspace_root();
    let src = skiff_protogen::locate_k8s_pb(&root)?;
    let bytes = skiff_protogen::generate(&src)?;
    let out = root.join(skiff_protogen::OUTPUT);
    std::fs::write(&out, &bytes)?;
    println!(
        "wrote {} ({} bytes) from {}",
        out.display(),
        bytes.len(),
        src.display()
    );
    Ok(())
}
