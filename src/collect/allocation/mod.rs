//! The allocation's own services for `gdrdoctor preflight`, below the commands: who this
//! process is in the job ([`engine`]: Slurm, Open MPI, PMI, torchrun, a Kubernetes Indexed
//! Job, or the flags), the job's secret ([`secret`]), the rendezvous' wire ([`wire`]: frames
//! with a hard cap, HMAC-SHA256 under the secret, a nonce per connection and a sequence number
//! per frame, a deadline on every read and write), rank 0's listener ([`server`]) and
//! coordinator ([`coordinator`]: gather the reports, roll them up with `collect::fleet`, run NCCL
//! across the nodes through each node's process, judge), and a node's side ([`client`]).
//!
//! Threads, no async runtime: rank 0 holds one thread per connection (256 ranks: 256 threads
//! that sleep in `read`), which is simpler to bound and to reason about than an event loop,
//! and costs less than a millisecond per rank (docs/performance.md).

pub mod client;
pub mod coordinator;
pub mod engine;
pub mod secret;
pub mod server;
pub mod wire;
