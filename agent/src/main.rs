fn main() {
    eprintln!("skiff-agent: not built yet");
    std::process::exit(1);
}
