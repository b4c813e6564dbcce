//! Real components for Bosun's tests — git repositories, an OpenSSH server, certificates,
//! a tmpfs to fill, a Terraform provider, and the GitHub double — shared by the
//! integration tests of `bosun-store`, `bosun-plans`, `bosun-server` and `bosun` (a
//! dev-dependency only, never published).
//!
//! - [`keys`]: the test GitHub App's RSA key pair (committed fixtures) and a JWT minter.
//! - [`github`]: [`GithubDouble`], a GitHub double on a loopback port serving the REST
//!   calls Bosun makes (installation tokens, revocation, installation lookup, check runs,
//!   issue comments) and git smart HTTP (clone/fetch through the real `git http-backend`),
//!   checking every REST request against GitHub's own OpenAPI description and credentials
//!   and permissions the way GitHub does, answering armed faults (rate limits, 502s), and
//!   recording every request for the test to inspect.
//! - [`git`]: [`BareRepo`] and [`WorkTree`], real git repositories to serve and push to.
//! - [`webhooks`]: `X-Hub-Signature-256` signing and GitHub's own example payloads from
//!   the `@octokit/webhooks-examples` npm package.
//! - [`tmpfs`]: a small filesystem of the test's own, to fill up.
//! - [`postgres`]: the PostgreSQL test server and scratch databases on it.
//! - [`netns`]: network namespaces of a test's own, joined by veth pairs: hosts the test
//!   itself cannot reach.
//! - [`tf_provider`]: [`TestProvider`], a real Terraform provider (`bosun/testing`, in
//!   Python) installed from a local mirror, so the real Terraform CLI plans real resource
//!   changes offline.
//!
//! Everything is a plain sync API: servers run on their own thread with their own tokio
//! runtime, so callers may be sync tests or tokio tests alike.

// Test-support code: a failed fixture step is a failed test, and panicking with the
// reason is the clearest way to say so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod git;
pub mod github;
pub mod keys;
pub mod netns;
pub mod oidc;
pub mod postgres;
pub mod sshd;
pub mod tf_provider;
pub mod tls;
pub mod tmpfs;
pub mod webhooks;

pub use git::{BareRepo, WorkTree};
pub use github::{
    ApiRequest, CheckRun, Comment, Fault, GitRequest, GithubDouble, InstallationLookup,
    IssuedToken, TokenRequest,
};
pub use keys::{app_jwt, app_private_key_pem, app_public_key_pem, write_app_key};
pub use sshd::{require_sshd, SshdFleet, SshdHost, SshdOptions};
pub use tf_provider::{require_terraform, require_tf_provider, terraform_binary, TestProvider};
pub use webhooks::{require_examples, sign, WebhookExamples};
