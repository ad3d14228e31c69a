//! Archive imports, listing, removal, pruning and overlay root filesystems (as root).

mod image_util;

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;

use agent::image::cli::format_table;
use agent::image::{ImageError, ImageStore, PullOptions, PullPolicy, RegistryAuth};
use image_util::*;

fn layer_dirs(store: &ImageStore) -> usize {
    std::fs::read_dir(store.root().join("layers/sha256"))
        .unwrap()
        .count()
}

#[test]
fn oci_and_docker_archives_import_share_layers_and_mount_as_overlay() {
    require_root_and_busybox();
    let tmp = tempfile::tempdir().unwrap();
    let store = ImageStore::open(&tmp.path().join("images")).unwrap();
    let image = busybox_image("hello from the upper layer\n");

    // OCI layout tar.
    let oci = tmp.path().join("testbox-oci.tar");
    write_oci_archive(&oci, &image, "skiff.test/testbox:oci");
    let imported = store.import_archive(&oci).unwrap();
    assert_eq!(imported.len(), 1);
    let a = &imported[0];
    assert_eq!(a.reference, "skiff.test/testbox:oci");
    assert_eq!(a.digest, image.manifest_digest());
    assert_eq!(a.manifest_digest, image.manifest_digest());
    assert_eq!(a.id, image.config_digest());
    assert_eq!(a.layers, image.diff_ids);
    assert_eq!(a.config.entrypoint, vec!["/bin/busybox"]);
    assert_eq!(a.config.cmd, vec!["sh"]);
    assert_eq!(a.config.env, vec!["PATH=/bin", "GREETING=hi"]);
    assert_eq!(a.config.working_dir, "/data");
    assert_eq!(a.config.exposed_ports, vec!["8080/tcp"]);
    assert!(a.size > 0);

    // docker save tar of the same image, gzipped as a whole, with two tags.
    let docker_plain = tmp.path().join("plain.tar");
    write_docker_archive(&docker_plain, &image, &["testbox:docker", "busybox:1.0"]);
    let docker = tmp.path().join("testbox-docker.tar.gz");
    std::fs::write(&docker, gzip(&std::fs::read(&docker_plain).unwrap())).unwrap();
    let imported = store.import_archive(&docker).unwrap();
    let refs: Vec<&str> = imported.iter().map(|i| i.reference.as_str()).collect();
    assert_eq!(
        refs,
        vec![
            "docker.io/library/testbox:docker",
            "docker.io/library/busybox:1.0"
        ]
    );
    assert_eq!(imported[0].layers, image.diff_ids);
    assert_eq!(imported[0].id, image.config_digest());

    // Layers are stored once; the layer blobs themselves are not kept.
    assert_eq!(layer_dirs(&store), 2);
    let blobs = std::fs::read_dir(store.root().join("blobs/sha256"))
        .unwrap()
        .count();
    // The manifest synthesized for the docker archive is byte-identical to the OCI one.
    assert_eq!(imported[0].manifest_digest, image.manifest_digest());
    assert_eq!(blobs, 2, "one config and one manifest");

    // Unpacked layers: the whiteout is a 0:0 char device, the opaque dir has its xattr.
    let upper = store.layer_path(&image.diff_ids[1]);
    assert!(is_whiteout(&upper.join("etc/removed")));
    assert_eq!(
        xattr::get(upper.join("data"), "trusted.overlay.opaque").unwrap(),
        Some(b"y".to_vec())
    );
    assert!(!upper.join("data/.wh..wh..opq").exists());

    // Listing and resolving.
    let list = store.list();
    assert_eq!(list.len(), 3);
    let table = format_table(&list);
    assert!(table.starts_with("IMAGE"), "{table}");
    assert!(table.contains("docker.io/library/busybox   1.0"), "{table}");
    let short = &image.config_digest()[7..20];
    assert!(table.contains(short), "{table}");
    assert!(store.resolve("busybox:1.0").is_some());
    assert!(store.resolve("docker.io/library/busybox:1.0").is_some());
    assert!(store.resolve("busybox").is_none());
    assert_eq!(store.resolve(short).unwrap().id, image.config_digest());

    // Policy Never finds the imported image without any registry.
    let never = smol::block_on(store.ensure(
        "skiff.test/testbox:oci",
        PullPolicy::Never,
        &RegistryAuth::Anonymous,
        &PullOptions::default(),
    ))
    .unwrap();
    assert_eq!(never.id, image.config_digest());
    let err = smol::block_on(store.ensure(
        "skiff.test/absent:1",
        PullPolicy::Never,
        &RegistryAuth::Anonymous,
        &PullOptions::default(),
    ))
    .unwrap_err();
    assert!(matches!(err, ImageError::NeverPull { .. }), "{err}");
    assert_eq!(err.reason(), "ErrImageNeverPull");

    // Overlay root filesystem.
    let scratch = tmp.path().join("c1/scratch");
    let target = tmp.path().join("c1/rootfs");
    let mount = store.mount_rootfs(a, &scratch, &target).unwrap();
    assert!(is_mount_point(&target));
    assert_eq!(
        std::fs::read_to_string(target.join("hello.txt")).unwrap(),
        "hello from the upper layer\n"
    );
    assert!(target.join("etc/passwd").is_file());
    assert!(
        !target.join("etc/removed").exists(),
        "whiteout hides the file"
    );
    assert!(
        !target.join("data/old").exists(),
        "opaque dir hides lower content"
    );
    assert_eq!(
        std::fs::read_to_string(target.join("data/new")).unwrap(),
        "new data\n"
    );
    assert_eq!(
        std::fs::read_link(target.join("bin/sh")).unwrap(),
        Path::new("busybox")
    );
    // Busybox really runs in the root filesystem.
    let out = Command::new("chroot")
        .arg(&target)
        .args([
            "/bin/sh",
            "-c",
            "/bin/busybox cat /hello.txt; echo written > /data/fresh; /bin/busybox ls /data",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("hello from the upper layer"), "{stdout}");
    assert!(stdout.contains("fresh") && stdout.contains("new") && !stdout.contains("old"));
    // Writes land in the scratch upper dir, never in the shared layers.
    assert!(scratch.join("upper/data/fresh").is_file());
    assert!(!store
        .layer_path(&image.diff_ids[1])
        .join("data/fresh")
        .exists());

    // Prune while mounted: the image a live root filesystem uses is kept (its container
    // may restart from it), with its layers.
    store.prune(&HashSet::new()).unwrap();
    let kept = store.list();
    assert_eq!(kept.len(), 3, "every name of the image in use stays");
    assert!(kept.iter().all(|i| i.id == image.config_digest()));
    assert_eq!(layer_dirs(&store), 2, "layers of a live mount are kept");
    assert!(target.join("bin/busybox").is_file());

    mount.unmount().unwrap();
    assert!(!is_mount_point(&target));
    assert!(!scratch.exists());
    // Unused now: prune removes the image and frees its blobs and layers.
    let freed = store.prune(&HashSet::new()).unwrap();
    assert!(store.list().is_empty());
    assert!(freed > 500_000, "busybox freed, got {freed}");
    assert_eq!(layer_dirs(&store), 0);
}

#[test]
fn remove_keeps_shared_layers_and_prune_keeps_images_in_use() {
    require_root_and_busybox();
    let tmp = tempfile::tempdir().unwrap();
    let store = ImageStore::open(&tmp.path().join("images")).unwrap();
    let one = busybox_image("one\n");
    let two = busybox_image("two\n"); // same lower layer, different upper layer
    let f1 = tmp.path().join("one.tar");
    let f2 = tmp.path().join("two.tar");
    write_docker_archive(&f1, &one, &["app:one"]);
    write_oci_archive(&f2, &two, "app:two");
    store.import_archive(&f1).unwrap();
    let imported = store.import_archive(&f2).unwrap();
    assert_eq!(imported[0].reference, "docker.io/library/app:two");
    assert_eq!(layer_dirs(&store), 3, "the busybox layer is shared");

    // Remove by reference: the shared layer stays for the other image.
    let removed = store.remove("app:one").unwrap();
    assert_eq!(removed.len(), 1);
    assert_eq!(layer_dirs(&store), 2);
    assert!(store.layer_path(&one.diff_ids[0]).is_dir());
    assert!(!store.layer_path(&one.diff_ids[1]).exists());
    assert!(matches!(
        store.remove("app:one"),
        Err(ImageError::NotPresent { .. })
    ));

    // The store survives a reopen.
    drop(store);
    let store = ImageStore::open(&tmp.path().join("images")).unwrap();
    assert_eq!(store.list().len(), 1);

    // Two handles on one directory (the agent and `skiff-agent image import`) see each
    // other's changes and do not overwrite them.
    let other = ImageStore::open(&tmp.path().join("images")).unwrap();
    other.import_archive(&f1).unwrap();
    assert!(
        store.resolve("app:one").is_some(),
        "seen by the first handle"
    );
    store.remove("app:two").unwrap();
    let names: Vec<String> = other.list().into_iter().map(|i| i.reference).collect();
    assert_eq!(names, vec!["docker.io/library/app:one"]);
    other.remove("app:one").unwrap();
    assert!(store.list().is_empty());
    store.import_archive(&f2).unwrap();

    // Prune keeps what is in use (by digest here).
    store.import_archive(&f1).unwrap();
    let keep: HashSet<String> = [one.manifest_digest()].into_iter().collect();
    store.prune(&keep).unwrap();
    let left: Vec<String> = store.list().into_iter().map(|i| i.reference).collect();
    assert_eq!(left, vec!["docker.io/library/app:one"]);
    assert_eq!(layer_dirs(&store), 2);

    // Remove by image ID.
    store.remove(&one.config_digest()[7..19]).unwrap();
    assert!(store.list().is_empty());
    assert_eq!(layer_dirs(&store), 0);
}

#[test]
fn broken_archives_are_refused() {
    require_root_and_busybox();
    let tmp = tempfile::tempdir().unwrap();
    let store = ImageStore::open(&tmp.path().join("images")).unwrap();

    let junk = tmp.path().join("junk.tar");
    std::fs::write(&junk, b"this is not a tar archive at all").unwrap();
    let err = store.import_archive(&junk).unwrap_err();
    assert!(matches!(err, ImageError::BadArchive { .. }), "{err}");

    // A config whose diff id does not match the layer content.
    let mut image = busybox_image("x\n");
    image.diff_ids[1] = format!("sha256:{}", "0".repeat(64));
    let rebuilt = {
        let mut cfg: serde_json::Value = serde_json::from_slice(&image.config).unwrap();
        cfg["rootfs"]["diff_ids"] = serde_json::json!(image.diff_ids);
        serde_json::to_vec(&cfg).unwrap()
    };
    image.config = rebuilt;
    let bad = tmp.path().join("bad.tar");
    write_docker_archive(&bad, &image, &["bad:1"]);
    let err = store.import_archive(&bad).unwrap_err();
    assert!(matches!(err, ImageError::DigestMismatch { .. }), "{err}");
    assert!(store.list().is_empty());
    // Nothing half-unpacked is left behind under the bad diff id.
    assert!(!store.layer_path(&image.diff_ids[1]).exists());

    // An OCI blob that does not match its digest.
    let good = busybox_image("y\n");
    let oci = tmp.path().join("tampered.tar");
    write_oci_archive(&oci, &good, "t:1");
    let mut data = std::fs::read(&oci).unwrap();
    let needle = b"\"Env\":[\"PATH=/bin\"";
    let pos = data
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    data[pos + 9] = b'Q'; // PATH -> QATH inside the config blob
    std::fs::write(&oci, data).unwrap();
    let err = store.import_archive(&oci).unwrap_err();
    assert!(matches!(err, ImageError::DigestMismatch { .. }), "{err}");
}

#[test]
fn cli_subcommands_drive_the_store() {
    use agent::image::cli::{cli_image, images_dir, ImageArgs};
    require_root_and_busybox();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("agent-data");
    let archive = tmp.path().join("cli.tar");
    write_docker_archive(&archive, &busybox_image("cli\n"), &["cli:1", "cli:2"]);
    let none = HashSet::new();
    cli_image(&data, ImageArgs::Import { file: archive }, &none).unwrap();
    let store = ImageStore::open(&images_dir(&data)).unwrap();
    assert_eq!(store.list().len(), 2);
    cli_image(&data, ImageArgs::Ls { quiet: false }, &none).unwrap();
    cli_image(
        &data,
        ImageArgs::Rm {
            references: vec!["cli:1".into()],
        },
        &none,
    )
    .unwrap();
    assert!(store.resolve("cli:1").is_none());
    assert!(cli_image(
        &data,
        ImageArgs::Rm {
            references: vec!["cli:1".into()],
        },
        &none
    )
    .is_err());
    let keep: HashSet<String> = ["cli:2".to_string()].into_iter().collect();
    cli_image(&data, ImageArgs::Prune, &keep).unwrap();
    assert!(store.resolve("cli:2").is_some());
    cli_image(&data, ImageArgs::Prune, &none).unwrap();
    assert!(store.list().is_empty());
    assert_eq!(layer_dirs(&store), 0);
}
