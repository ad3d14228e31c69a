//! What went wrong with an image.

use std::sync::Arc;

/// Every failure of the image store. [`ImageError::reason`] gives the Kubernetes container
/// waiting reason (`ErrImagePull`, `ErrImageNeverPull`, `InvalidImageName`...).
///
/// Clone so that concurrent pulls of one image can all receive the one failure.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ImageError {
    #[error("invalid image name {reference:?}: {reason}")]
    InvalidReference { reference: String, reason: String },
    /// The registry does not have the repository, tag or digest.
    #[error("image {reference} not found in its registry: {detail}")]
    NotFound { reference: String, detail: String },
    /// Credentials are missing or refused.
    #[error("not authorized to pull {reference} from {registry}: {detail}; check the registry credentials (imagePullSecrets or the node's registry configuration)")]
    Unauthorized {
        reference: String,
        registry: String,
        detail: String,
    },
    /// The registry could not be reached or the connection failed.
    #[error("cannot reach registry {registry}: {detail}")]
    Network { registry: String, detail: String },
    /// The registry answered something unexpected.
    #[error("registry {registry} answered {status} for {what}: {detail}")]
    Registry {
        registry: String,
        status: u16,
        what: String,
        detail: String,
    },
    /// A manifest list/index has no entry for this node's platform.
    #[error("image {reference} has no variant for platform {platform} (available: {available})")]
    NoMatchingPlatform {
        reference: String,
        platform: String,
        available: String,
    },
    /// Content does not match the digest that names it.
    #[error("digest mismatch for {what}: expected {expected}, got {actual}; the content was corrupted or tampered with")]
    DigestMismatch {
        what: String,
        expected: String,
        actual: String,
    },
    /// A manifest, index or config cannot be understood.
    #[error("bad image manifest or config for {reference}: {detail}")]
    BadManifest { reference: String, detail: String },
    /// A layer cannot be decompressed or unpacked.
    #[error("cannot unpack layer {digest}: {detail}")]
    BadLayer { digest: String, detail: String },
    /// An archive given to `import` is not an OCI layout or `docker save` tar.
    #[error("cannot import {file}: {detail}")]
    BadArchive { file: String, detail: String },
    /// `imagePullPolicy: Never` and the image is not on the node.
    #[error("image {reference} is not present on the node and the pull policy is Never; import it with `skiff-agent image import`")]
    NeverPull { reference: String },
    /// The image is not in the local store.
    #[error("image {reference} is not present on the node")]
    NotPresent { reference: String },
    #[error("cannot mount the root filesystem at {target}: {detail}")]
    Mount { target: String, detail: String },
    #[error("invalid registry configuration: {0}")]
    Config(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: Arc<std::io::Error>,
    },
}

impl ImageError {
    /// The Kubernetes waiting reason for a container whose image failed this way.
    pub fn reason(&self) -> &'static str {
        match self {
            ImageError::InvalidReference { .. } => "InvalidImageName",
            ImageError::NeverPull { .. } => "ErrImageNeverPull",
            _ => "ErrImagePull",
        }
    }

    /// Whether retrying later may help (network trouble, server errors).
    pub fn is_transient(&self) -> bool {
        match self {
            ImageError::Network { .. } => true,
            ImageError::Registry { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }

    pub(crate) fn io(context: impl Into<String>, e: std::io::Error) -> ImageError {
        ImageError::Io {
            context: context.into(),
            source: Arc::new(e),
        }
    }
}

/// Adds a context to io results.
pub(crate) trait IoContext<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, ImageError>;
}

impl<T> IoContext<T> for Result<T, std::io::Error> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, ImageError> {
        self.map_err(|e| ImageError::io(context(), e))
    }
}
