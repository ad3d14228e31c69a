//! The blob endpoint of the agent's port, for the nodes of its site
//! (docs/design/site-images.md): `GET /skiff/v1/blobs/<digest>?image=<reference>&size=<n>`
//! answers the compressed layer blob with its `Content-Length`, fetching it from the
//! registry first if this node does not have it ([`crate::image::peers::Site`]), or `404`
//! with a one-line reason. Only node certificates reach it (see [`super::logs`]).

use std::io;

use futures_lite::AsyncWriteExt;

use super::logs::{refuse, LogSource, Refusal};
use crate::image::http::Url;
use crate::image::peers::BLOB_PATH;

/// True when the request is for the blob endpoint.
pub fn is_blob_request(head: &str) -> bool {
    let line = head.lines().next().unwrap_or("");
    line.split(' ')
        .nth(1)
        .is_some_and(|target| target.starts_with(BLOB_PATH))
}

/// A parsed blob request.
#[derive(Debug, PartialEq, Eq)]
pub struct BlobRequest {
    pub digest: String,
    pub image: String,
    /// 0 when not given.
    pub size: u64,
}

/// Parses the request line of a blob request.
pub fn parse_request(head: &str) -> Result<BlobRequest, Refusal> {
    let line = head.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method != "GET" {
        return Err(Refusal(405, format!("method {method} is not allowed")));
    }
    let url = Url::parse(&format!("https://node{target}"))
        .map_err(|e| Refusal(400, format!("bad request target: {e}")))?;
    let digest = url
        .path()
        .strip_prefix(BLOB_PATH)
        .filter(|d| !d.is_empty() && !d.contains('/'))
        .ok_or_else(|| Refusal(404, format!("no such path {}", url.path())))?;
    let mut req = BlobRequest {
        digest: digest.to_string(),
        image: String::new(),
        size: 0,
    };
    for (k, v) in url.query_pairs() {
        match k.as_ref() {
            "image" => req.image = v.into_owned(),
            "size" => {
                req.size = v
                    .parse()
                    .map_err(|_| Refusal(400, format!("size must be a number, not {v:?}")))?
            }
            _ => {}
        }
    }
    if req.image.is_empty() {
        return Err(Refusal(400, "the image parameter is missing".into()));
    }
    Ok(req)
}

/// Serves a blob request from a node.
pub(super) async fn serve<S>(mut stream: S, head: &str, source: &LogSource) -> io::Result<()>
where
    S: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin,
{
    let req = match parse_request(head) {
        Ok(r) => r,
        Err(refusal) => return refuse(&mut stream, refusal).await,
    };
    let Some(site) = &source.site else {
        let msg = "image sharing is off on this node".to_string();
        return refuse(&mut stream, Refusal(404, msg)).await;
    };
    let found = Box::pin(site.blob_for_peer(&req.digest, &req.image, req.size)).await;
    let (file, len) = match found {
        Ok(found) => found,
        Err(e) => {
            tracing::info!(digest = %req.digest, image = %req.image, "a peer's blob: {e}");
            return refuse(&mut stream, Refusal(404, e.to_string())).await;
        }
    };
    tracing::debug!(digest = %req.digest, bytes = len, "serving a blob to a peer");
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await?;
    let file = smol::fs::File::from(file);
    futures_lite::io::copy(futures_lite::AsyncReadExt::take(file, len), &mut stream).await?;
    stream.flush().await?;
    stream.close().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_blob_requests() {
        let d = format!("sha256:{}", "a".repeat(64));
        let head = format!(
            "GET /skiff/v1/blobs/{d}?image=10.0.0.1%3A5000%2Fapp%3Av1&size=12 HTTP/1.1\r\n\r\n"
        );
        assert!(is_blob_request(&head));
        assert_eq!(
            parse_request(&head),
            Ok(BlobRequest {
                digest: d.clone(),
                image: "10.0.0.1:5000/app:v1".into(),
                size: 12,
            })
        );
        let plain = format!("GET /skiff/v1/blobs/{d}?image=10.0.0.1:5000/app:v1 HTTP/1.1\r\n\r\n");
        assert_eq!(parse_request(&plain).unwrap().image, "10.0.0.1:5000/app:v1");
        assert!(!is_blob_request(
            "GET /containerLogs/a/b/c HTTP/1.1\r\n\r\n"
        ));
        let post = format!("POST /skiff/v1/blobs/{d}?image=x HTTP/1.1\r\n\r\n");
        assert_eq!(parse_request(&post).unwrap_err().0, 405);
        let no_image = format!("GET /skiff/v1/blobs/{d} HTTP/1.1\r\n\r\n");
        assert_eq!(parse_request(&no_image).unwrap_err().0, 400);
        assert_eq!(
            parse_request("GET /skiff/v1/blobs/ HTTP/1.1\r\n\r\n")
                .unwrap_err()
                .0,
            404
        );
    }
}
