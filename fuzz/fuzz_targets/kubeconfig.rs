//! Kubeconfig files: parsed and resolved to a context as `skiff` and the API client do. The
//! files a kubeconfig names are looked for in an empty temporary directory (each name made one
//! path component there), so that the target never reads the machine's files: a name such as
//! /dev/zero would read without end.
#![no_main]

use libfuzzer_sys::fuzz_target;

fn confine(name: &mut Option<String>) {
    if let Some(n) = name {
        *n = n.replace('/', "_");
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(mut kc) = api::kubeconfig::Kubeconfig::parse(text) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        kc.path = Some(dir.path().join("config"));
        for c in &mut kc.clusters {
            confine(&mut c.cluster.certificate_authority);
        }
        for u in &mut kc.users {
            confine(&mut u.user.token_file);
            confine(&mut u.user.client_certificate);
            confine(&mut u.user.client_key);
        }
        let _ = kc.resolve(None);
        let _ = kc.to_yaml();
    }
});
