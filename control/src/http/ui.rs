//! The web dashboard at `/ui/`: a few static files embedded in the binary (no build step, no
//! CDN). The page holds no privilege of its own: it calls the API from the browser with the
//! user's bearer token (or the browser's client certificate), so it can do exactly what the
//! user can. Serving the files needs no authentication, as they hold no data.
//!
//! Caching: the names are fixed (no build step to hash them), so every answer carries a
//! strong ETag (a digest of the file) and `Cache-Control: no-cache`: browsers keep the files
//! and revalidate them with `If-None-Match`, which answers 304 without a body. Every answer
//! also carries a strict Content-Security-Policy: scripts, styles and API calls from this
//! origin only, no inline code, no frames.

use std::sync::OnceLock;

use tide::http::StatusCode;

use super::{header, State};
use crate::error::ApiError;

/// Where the dashboard is served.
pub const PREFIX: &str = "/ui/";

/// The policy of every dashboard answer: nothing but this origin's own files and API.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

/// (name under /ui/, content type, bytes)
const FILES: &[(&str, &str, &[u8])] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("../../ui/index.html"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_bytes!("../../ui/style.css"),
    ),
    (
        "boot.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../ui/boot.js"),
    ),
    (
        "api.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../ui/api.js"),
    ),
    (
        "table.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../ui/table.js"),
    ),
    (
        "views.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../ui/views.js"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../ui/app.js"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_bytes!("../../ui/favicon.svg"),
    ),
];

/// The ETag of each file, in the order of [`FILES`], computed once.
fn etags() -> &'static [String] {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| {
        FILES
            .iter()
            .map(|(_, _, bytes)| {
                let d = ring::digest::digest(&ring::digest::SHA256, bytes);
                let hex: String = d.as_ref()[..12]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                format!("\"{hex}\"")
            })
            .collect()
    })
}

/// The file a path under `/ui` names: `/ui/` is the page; `/ui` itself is redirected.
enum Target {
    Redirect,
    File(usize),
    Missing,
}

fn target(path: &str) -> Target {
    if path == "/ui" {
        return Target::Redirect;
    }
    let name = path.strip_prefix(PREFIX).unwrap_or("");
    let name = if name.is_empty() { "index.html" } else { name };
    match FILES.iter().position(|(n, _, _)| *n == name) {
        Some(i) => Target::File(i),
        None => Target::Missing,
    }
}

/// Answers a request under `/ui` (`enabled` false: as if there were nothing there).
pub(super) fn serve(req: &tide::Request<State>, enabled: bool) -> Result<tide::Response, ApiError> {
    if !enabled {
        return Err(ApiError::path_not_found());
    }
    let method = req.method();
    if method != tide::http::Method::Get && method != tide::http::Method::Head {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow {method} here"
        )));
    }
    let i = match target(super::request_path(req)) {
        Target::Redirect => {
            let mut r = tide::Response::new(StatusCode::MovedPermanently);
            r.insert_header("Location", PREFIX);
            return Ok(r);
        }
        Target::Missing => return Err(ApiError::path_not_found()),
        Target::File(i) => i,
    };
    let (_, content_type, bytes) = FILES[i];
    let etag = &etags()[i];
    let fresh = header(req, "If-None-Match")
        .is_some_and(|h| h.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut r = tide::Response::new(if fresh {
        StatusCode::NotModified
    } else {
        StatusCode::Ok
    });
    r.insert_header("ETag", etag.as_str());
    r.insert_header("Cache-Control", "no-cache");
    r.insert_header("Content-Security-Policy", CSP);
    r.insert_header("X-Content-Type-Options", "nosniff");
    r.insert_header("Referrer-Policy", "no-referrer");
    r.insert_header("X-Frame-Options", "DENY");
    if !fresh {
        r.set_body(bytes);
        r.set_content_type(content_type);
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_files() {
        assert!(matches!(target("/ui"), Target::Redirect));
        assert!(matches!(target("/ui/"), Target::File(0)));
        assert!(matches!(target("/ui/app.js"), Target::File(_)));
        assert!(matches!(target("/ui/../etc/passwd"), Target::Missing));
        assert!(matches!(target("/ui/nope.js"), Target::Missing));
    }

    #[test]
    fn etags_are_distinct_and_quoted() {
        let tags = etags();
        assert_eq!(tags.len(), FILES.len());
        for (i, t) in tags.iter().enumerate() {
            assert!(t.starts_with('"') && t.ends_with('"'));
            assert!(!tags[..i].contains(t), "two files share {t}");
        }
    }

    /// The page's module scripts and style sheet are all files served here (a file the page
    /// names but the binary lacks would be a blank page in the browser only).
    #[test]
    fn every_file_the_page_names_is_embedded() {
        let page = std::str::from_utf8(FILES[0].2).expect("utf-8");
        for name in ["style.css", "app.js", "favicon.svg"] {
            assert!(page.contains(name), "index.html does not name {name}");
        }
        for (_, _, bytes) in FILES {
            let text = std::str::from_utf8(bytes).expect("utf-8");
            for imported in text
                .split("from './")
                .skip(1)
                .filter_map(|s| s.split('\'').next())
            {
                assert!(
                    FILES.iter().any(|(n, _, _)| *n == imported),
                    "{imported} is imported but not embedded"
                );
            }
        }
        // No inline script or style: the policy would block it.
        assert!(!page.contains("<script>") && !page.contains("style="));
    }
}
