//! Config files of `skiff server` and `skiff-agent`: a flat TOML table whose keys are the
//! long flag names (`data-dir = "/var/lib/skiff/server"`, `tls-san = ["a", "b"]`,
//! `disable-agent = true`). The file's values become the flags' defaults, so the precedence
//! is: command-line flag, then environment variable, then the file, then the built-in
//! default. An unknown key is refused.
//!
//! [`parse_args`] does it all for a clap command: it finds `--config FILE` (or its
//! environment twin, or the default file when it exists), reads it and parses the command
//! line again with the file's values in place.

use std::path::{Path, PathBuf};

/// What failed while loading a config file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading the config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config file {path}: unknown key {key:?} (keys are the long flag names: {known})")]
    UnknownKey {
        path: PathBuf,
        key: String,
        known: String,
    },
    #[error(
        "config file {path}: key {key:?} must be a string, number, boolean or an array of them"
    )]
    BadValue { path: PathBuf, key: String },
}

/// One setting of a config file: the flag's long name and its value(s) as command-line text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub key: String,
    pub values: Vec<String>,
}

/// Parses the text of a config file into settings, in file order.
pub fn parse(path: &Path, text: &str) -> Result<Vec<Setting>, ConfigError> {
    use toml::de::{DeTable, DeValue};
    let table = DeTable::parse(text)
        .map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.message().to_string(),
        })?
        .into_inner();
    let bad = |key: &str| ConfigError::BadValue {
        path: path.to_path_buf(),
        key: key.to_string(),
    };
    let mut out = Vec::new();
    for (key, value) in table {
        let key = key.into_inner().into_owned();
        let values = match value.into_inner() {
            DeValue::Array(items) => items
                .into_iter()
                .map(|v| scalar(v.into_inner()).ok_or_else(|| bad(&key)))
                .collect::<Result<Vec<_>, _>>()?,
            v => vec![scalar(v).ok_or_else(|| bad(&key))?],
        };
        out.push(Setting { key, values });
    }
    Ok(out)
}

fn scalar(v: toml::de::DeValue<'_>) -> Option<String> {
    use toml::de::DeValue;
    match v {
        DeValue::String(s) => Some(s.into_owned()),
        DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
            .ok()
            .map(|n| n.to_string()),
        DeValue::Float(f) => Some(f.as_str().to_string()),
        DeValue::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Reads and parses a config file.
pub fn load(path: &Path) -> Result<Vec<Setting>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(path, &text)
}

/// Flags that make no sense in a config file.
const NOT_SETTINGS: [&str; 3] = ["config", "help", "version"];

/// Makes the settings the defaults of `cmd`'s flags (matched by long name).
pub fn apply(
    mut cmd: clap::Command,
    path: &Path,
    settings: &[Setting],
) -> Result<clap::Command, ConfigError> {
    for s in settings {
        let id = cmd
            .get_arguments()
            .find(|a| {
                a.get_long() == Some(s.key.as_str()) && !NOT_SETTINGS.contains(&s.key.as_str())
            })
            .map(|a| a.get_id().clone());
        let Some(id) = id else {
            let known: Vec<&str> = cmd
                .get_arguments()
                .filter_map(|a| a.get_long())
                .filter(|l| !NOT_SETTINGS.contains(l))
                .collect();
            return Err(ConfigError::UnknownKey {
                path: path.to_path_buf(),
                key: s.key.clone(),
                known: known.join(", "),
            });
        };
        // clap keeps defaults as `&'static str`; a config file is read once per process.
        let values: Vec<&'static str> = s
            .values
            .iter()
            .map(|v| &*Box::leak(v.clone().into_boxed_str()))
            .collect();
        cmd = cmd.mut_arg(id, |a| a.default_values(values));
    }
    Ok(cmd)
}

/// Where the config file comes from.
pub struct ConfigSource<'a> {
    /// The subcommand whose flags the file sets (`Some("server")` for `skiff server`), or
    /// `None` for the top-level command.
    pub subcommand: Option<&'a str>,
    /// The id of the `--config` argument (its derive field name).
    pub arg_id: &'a str,
    /// Read when `--config` is not given and the file exists.
    pub default_path: &'a str,
}

/// Parses the command line of `T` with its config file's settings as defaults. Errors
/// (a bad file included) come back as clap errors, printed the way clap prints them.
pub fn parse_args<T, I>(args: I, source: &ConfigSource<'_>) -> Result<T, clap::Error>
where
    T: clap::Parser,
    I: IntoIterator,
    I::Item: Into<std::ffi::OsString> + Clone,
{
    use clap::parser::ValueSource;
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let cmd = T::command();
    let matches = cmd.clone().try_get_matches_from(&args)?;
    let sub = match source.subcommand {
        Some(name) => matches.subcommand_matches(name),
        None => Some(&matches),
    };
    let Some(sub) = sub else {
        return T::from_arg_matches(&matches);
    };
    let given = sub.get_one::<PathBuf>(source.arg_id).cloned();
    let explicit = matches!(
        sub.value_source(source.arg_id),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    );
    let path = match given {
        Some(p) if explicit => p,
        _ => {
            let p = PathBuf::from(source.default_path);
            if !p.exists() {
                return T::from_arg_matches(&matches);
            }
            p
        }
    };
    let to_clap =
        |e: ConfigError| clap::Error::raw(clap::error::ErrorKind::InvalidValue, format!("{e}\n"));
    let settings = match load(&path) {
        Ok(s) => s,
        // The default file of a root-run service may be unreadable to a user running an
        // offline subcommand; only a file asked for must be readable.
        Err(ConfigError::Read { source: e, .. })
            if !explicit && e.kind() == std::io::ErrorKind::PermissionDenied =>
        {
            eprintln!("warning: cannot read {}: {e}; ignoring it", path.display());
            return T::from_arg_matches(&matches);
        }
        Err(e) => return Err(to_clap(e)),
    };
    let cmd = match source.subcommand {
        Some(name) => {
            let target = cmd
                .find_subcommand(name)
                .cloned()
                .ok_or_else(|| clap::Error::raw(clap::error::ErrorKind::InvalidSubcommand, name))?;
            let patched = apply(target, &path, &settings).map_err(to_clap)?;
            cmd.mut_subcommand(name, |_| patched)
        }
        None => apply(cmd, &path, &settings).map_err(to_clap)?,
    };
    let matches = cmd.try_get_matches_from(&args)?;
    T::from_arg_matches(&matches)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_become_command_line_text() {
        let text =
            "data-dir = \"/d\"\nevent-window = 5\ndisable-agent = true\ntls-san = [\"a\", \"b\"]\n";
        let s = parse(Path::new("f.toml"), text).unwrap();
        let get = |k: &str| s.iter().find(|x| x.key == k).unwrap().values.clone();
        assert_eq!(get("data-dir"), ["/d"]);
        assert_eq!(get("event-window"), ["5"]);
        assert_eq!(get("disable-agent"), ["true"]);
        assert_eq!(get("tls-san"), ["a", "b"]);
        let e = parse(Path::new("f.toml"), "[section]\nx = 1\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "config file f.toml: key \"section\" must be a string, number, boolean or an array of them"
        );
        let e = parse(Path::new("f.toml"), "x = \n").unwrap_err();
        assert!(e.to_string().starts_with("config file f.toml: "), "{e}");
    }

    mod with_clap {
        use super::super::*;
        use clap::Parser;

        #[derive(Debug, Parser)]
        struct Flags {
            #[arg(long, env = "SKIFF_CONFIG_TEST_CONFIG")]
            config: Option<PathBuf>,
            #[arg(long, env = "SKIFF_CONFIG_TEST_NAME", default_value = "builtin")]
            name: String,
            #[arg(long, default_value_t = 1)]
            count: u32,
            #[arg(long)]
            flag: bool,
            #[arg(long = "item", value_delimiter = ',')]
            items: Vec<String>,
        }

        fn write(dir: &Path, text: &str) -> PathBuf {
            let p = dir.join("c.toml");
            std::fs::write(&p, text).unwrap();
            p
        }

        const SOURCE: ConfigSource<'static> = ConfigSource {
            subcommand: None,
            arg_id: "config",
            default_path: "/nonexistent/skiff-test.toml",
        };

        #[test]
        fn file_values_sit_between_flags_and_builtin_defaults() {
            let dir = tempfile::tempdir().unwrap();
            let p = write(
                dir.path(),
                "name = \"file\"\ncount = 7\nflag = true\nitem = [\"x\", \"y\"]\n",
            );
            let p = p.to_str().unwrap();
            let f: Flags = parse_args(["t", "--config", p], &SOURCE).unwrap();
            assert_eq!(
                (f.name.as_str(), f.count, f.flag, f.items.clone()),
                ("file", 7, true, vec!["x".to_string(), "y".to_string()])
            );
            let f: Flags = parse_args(
                ["t", "--config", p, "--name", "flag", "--count", "2"],
                &SOURCE,
            )
            .unwrap();
            assert_eq!((f.name.as_str(), f.count), ("flag", 2));
            let f: Flags = parse_args(["t"], &SOURCE).unwrap();
            assert_eq!((f.name.as_str(), f.count, f.flag), ("builtin", 1, false));
        }

        #[test]
        fn unknown_keys_and_bad_values_are_refused() {
            let dir = tempfile::tempdir().unwrap();
            let p = write(dir.path(), "nmae = \"x\"\n");
            let e = parse_args::<Flags, _>(["t", "--config", p.to_str().unwrap()], &SOURCE)
                .unwrap_err();
            let text = e.to_string();
            assert!(text.contains("unknown key \"nmae\""), "{text}");
            assert!(text.contains("name, count, flag, item"), "{text}");
            let p = write(dir.path(), "count = \"many\"\n");
            let e = parse_args::<Flags, _>(["t", "--config", p.to_str().unwrap()], &SOURCE)
                .unwrap_err();
            assert!(e.to_string().contains("many"), "{e}");
            let e = parse_args::<Flags, _>(["t", "--config", "/nonexistent/x.toml"], &SOURCE)
                .unwrap_err();
            assert!(e.to_string().contains("reading the config file"), "{e}");
        }
    }
}
