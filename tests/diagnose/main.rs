//! `gdrdoctor diagnose` on real pasted text (fixtures/pastes, ../shared/realdata) and on
//! damaged variants built from it: every logged GDR decision is read as NCCL logged it, every
//! matrix parses or is refused with a reason, and no damaged variant yields a cell the clean
//! paste does not have.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;
use common::*;
use gdrdoctor_checks::paste::nccl::{Direction, FailureKind, Transport};
use gdrdoctor_checks::paste::report::{diagnose, DiagnoseReport};
use gdrdoctor_checks::paste::topo::Matrix;
use gdrdoctor_checks::paste::{self, BlockStatus, Input, Kind};
use gdrdoctor_checks::report::Status;
use gdrdoctor_checks::RunOptions;
use std::collections::BTreeMap;
use std::path::PathBuf;

mod cli;
mod corpus;
mod encodings;
mod excerpts;
mod jobs;
mod matrices;
mod model;
mod nccl_logs;
mod predictions;
mod readers;
mod reviewed;

fn realdata() -> Option<PathBuf> {
    require::realdata(&repo())
}

fn pastes() -> PathBuf {
    repo().join("fixtures/pastes")
}

fn text(name: &str) -> String {
    std::fs::read_to_string(pastes().join(name)).unwrap()
}

fn input(name: &str, text: String) -> Input {
    Input {
        name: name.into(),
        text,
    }
}

fn run_on(names: &[&str]) -> DiagnoseReport {
    let inputs: Vec<Input> = names.iter().map(|n| input(n, text(n))).collect();
    diagnose(&inputs, &RunOptions::default())
}

fn log_of(name: &str) -> paste::nccl::NcclLog {
    let p = paste::read(&[input(name, text(name))]);
    p.nccl_merged().expect("an NCCL log block")
}

fn statuses<'a>(r: &'a DiagnoseReport, id: &str) -> Vec<(&'a str, Status)> {
    r.findings
        .iter()
        .filter(|f| f.id == id)
        .map(|f| (f.subject.as_str(), f.status))
        .collect()
}
