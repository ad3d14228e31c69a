fn main() {
    let text = std::fs::read_to_string(std::env::args().nth(1).unwrap()).unwrap();
    for doc in api::codec::parse_manifests(&text).unwrap() {
        let kind = api::codec::type_of(&doc).unwrap();
        api::with_kind!(kind, K, {
            let mut o: K = api::codec::from_json(doc).unwrap();
            api::Resource::set_defaults(&mut o);
            println!(
                "{}",
                serde_json::to_string_pretty(&api::codec::to_json(&o)).unwrap()
            );
        });
    }
}
