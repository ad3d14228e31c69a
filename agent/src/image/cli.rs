//! `skiff-agent image ...`: import, list, remove, prune and pull images on this node.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::{
    ImageInfo, ImageStore, Platform, PullOptions, Reference, RegistryAuth, RegistryConfig,
};

/// The `image` subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ImageArgs {
    /// Load every image of an OCI layout tar or a `docker save` tar (gzipped or not).
    Import {
        /// The archive.
        file: PathBuf,
    },
    /// List the images on this node.
    #[command(alias = "list")]
    Ls {
        /// Print only image IDs.
        #[arg(short, long)]
        quiet: bool,
    },
    /// Remove an image by reference or ID.
    #[command(alias = "rmi")]
    Rm {
        /// Image references or IDs.
        #[arg(required = true)]
        references: Vec<String>,
    },
    /// Remove every image not used by a container, and unused layers.
    Prune,
    /// Pull an image from its registry.
    Pull {
        reference: String,
        /// Registry user name (the password is read from SKIFF_REGISTRY_PASSWORD).
        #[arg(long)]
        username: Option<String>,
        /// Platform to pull, `os/arch[/variant]` (default: this node's).
        #[arg(long)]
        platform: Option<String>,
        /// Registry mirrors, rewrites, credentials and CAs, in k3s's registries.yaml format.
        #[arg(long, value_name = "FILE", default_value = super::mirrors::DEFAULT_PATH)]
        registries_config: PathBuf,
    },
}

/// Where the image store lives under the agent's data directory.
pub fn images_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("images")
}

/// Where the registry configuration is read from (see [`RegistryConfig::load`]).
pub fn registries_file(data_dir: &Path) -> PathBuf {
    data_dir.join("registries.json")
}

/// Runs an `image` subcommand against the store in `<data_dir>/images`. `in_use` lists the
/// images (references, IDs or digests) that containers use, kept by `prune`.
pub fn cli_image(data_dir: &Path, args: ImageArgs, in_use: &HashSet<String>) -> anyhow::Result<()> {
    let store = ImageStore::open(&images_dir(data_dir))?;
    let mut out = std::io::stdout().lock();
    match args {
        ImageArgs::Import { file } => {
            let images = store
                .import_archive(&file)
                .with_context(|| format!("importing {}", file.display()))?;
            for i in images {
                writeln!(out, "imported {} ({})", i.reference, short_id(&i.id))?;
            }
        }
        ImageArgs::Ls { quiet } => {
            let mut images = store.list();
            images.sort_by(|a, b| a.reference.cmp(&b.reference));
            if quiet {
                for i in &images {
                    writeln!(out, "{}", i.id)?;
                }
            } else {
                write!(out, "{}", format_table(&images))?;
            }
        }
        ImageArgs::Rm { references } => {
            for r in references {
                for i in store.remove(&r)? {
                    writeln!(out, "Deleted: {}", i.reference)?;
                }
            }
        }
        ImageArgs::Prune => {
            let freed = store.prune(in_use)?;
            writeln!(out, "freed {}", human_size(freed))?;
        }
        ImageArgs::Pull {
            reference,
            username,
            platform,
            registries_config,
        } => {
            let auth = match username {
                Some(username) => RegistryAuth::Basic {
                    username,
                    password: std::env::var("SKIFF_REGISTRY_PASSWORD").context(
                        "--username needs the password in the SKIFF_REGISTRY_PASSWORD environment variable",
                    )?,
                },
                None => RegistryAuth::Anonymous,
            };
            let platform = match platform {
                Some(p) => Some(parse_platform(&p)?),
                None => None,
            };
            let mut registries = RegistryConfig::load(&registries_file(data_dir))?;
            let yaml = RegistryConfig::load_yaml(&registries_config)?;
            registries.merge_yaml(yaml);
            let opts = PullOptions {
                registries,
                platform,
                site: None,
            };
            let info = smol::block_on(store.pull(&reference, &auth, &opts))?;
            writeln!(
                out,
                "Image is up to date for {} ({})",
                info.reference,
                short_id(&info.id)
            )?;
        }
    }
    Ok(())
}

fn parse_platform(s: &str) -> anyhow::Result<Platform> {
    let parts: Vec<&str> = s.split('/').collect();
    match parts.as_slice() {
        [os, arch] => Ok(Platform {
            os: (*os).into(),
            architecture: (*arch).into(),
            variant: None,
        }),
        [os, arch, variant] => Ok(Platform {
            os: (*os).into(),
            architecture: (*arch).into(),
            variant: Some((*variant).into()),
        }),
        _ => anyhow::bail!("bad platform {s:?}: expected os/arch[/variant]"),
    }
}

/// The first 13 hex digits of an ID, as crictl shows.
pub fn short_id(id: &str) -> String {
    id.strip_prefix("sha256:")
        .unwrap_or(id)
        .chars()
        .take(13)
        .collect()
}

/// Sizes as crictl prints them: `4.26MB`.
pub fn human_size(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1000.0 && u < UNITS.len() - 1 {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{n}B")
    } else {
        format!("{v:.3}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
            + UNITS[u]
    }
}

/// `IMAGE TAG IMAGE ID SIZE`, as `crictl images` prints.
pub fn format_table(images: &[ImageInfo]) -> String {
    let mut rows = vec![[
        "IMAGE".to_string(),
        "TAG".to_string(),
        "IMAGE ID".to_string(),
        "SIZE".to_string(),
    ]];
    for i in images {
        let (name, tag) = match Reference::parse(&i.reference) {
            Ok(r) if !i.reference.starts_with("sha256:") => {
                (r.name(), r.tag.clone().unwrap_or_else(|| "<none>".into()))
            }
            _ => ("<none>".into(), "<none>".into()),
        };
        rows.push([name, tag, short_id(&i.id), human_size(i.size)]);
    }
    let mut widths = [0usize; 4];
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let mut s = String::new();
    for r in &rows {
        let line = format!(
            "{:w0$}   {:w1$}   {:w2$}   {}",
            r[0],
            r[1],
            r[2],
            r[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        );
        s.push_str(line.trim_end());
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_ids_print_like_crictl() {
        assert_eq!(human_size(999), "999B");
        assert_eq!(human_size(4_260_000), "4.26MB");
        assert_eq!(human_size(1_000_000), "1MB");
        assert_eq!(short_id("sha256:0123456789abcdef"), "0123456789abc");
        assert_eq!(
            parse_platform("linux/arm64/v8").unwrap().variant.as_deref(),
            Some("v8")
        );
        assert!(parse_platform("linux").is_err());
    }
}
