//! A deadline that may not be set, for `tokio::select!` branches: the
//! future a disabled branch still builds must not panic on `None`.

use tokio::time::Instant;

/// Sleeps until `at`; with `None`, never wakes (the caller's branch is
/// disabled by its `if at.is_some()` guard anyway).
pub async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
