fn main() {
    eprintln!("skiff: not built yet");
    std::process::exit(1);
}
