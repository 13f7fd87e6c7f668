//! One computation per report: while a [`MemoScope`] for a node is open, what the verdicts
//! derive from it (its placed endpoints, NCCL's decision) is computed at the first ask and
//! shared by every check of the report. It knows none of the values it keeps: one cell per
//! type.

use crate::model::Node;
use std::any::{Any, TypeId};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// A node's memo: one value per type, each computed at the first ask.
#[derive(Default)]
pub struct Memo {
    cells: Mutex<Vec<(TypeId, Arc<dyn Any + Send + Sync>)>>,
}

impl Memo {
    /// The cell of the values of type `T`, made at the first ask.
    fn cell<T: Send + Sync + 'static>(&self) -> Arc<OnceLock<Arc<T>>> {
        let mut cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        let id = TypeId::of::<T>();
        let found = cells
            .iter()
            .find(|(t, _)| *t == id)
            .and_then(|(_, c)| c.clone().downcast::<OnceLock<Arc<T>>>().ok());
        found.unwrap_or_else(|| {
            let c = Arc::new(OnceLock::new());
            cells.push((id, c.clone()));
            c
        })
    }
}

type Slot = Arc<Memo>;

/// The open scopes: (node address, scopes open for it, its slot). A node's address names it
/// only while it is borrowed, which each [`MemoScope`] is for as long as it lives; the entry
/// goes with the last one.
static MEMO: Mutex<Vec<(usize, usize, Slot)>> = Mutex::new(Vec::new());

pub(super) fn memo() -> MutexGuard<'static, Vec<(usize, usize, Slot)>> {
    MEMO.lock().unwrap_or_else(|p| p.into_inner())
}

/// While alive, `gdr::shared` computes the node's decision once (the checks of one report ask
/// for it four times). It borrows the node, so the node cannot change or move under it.
/// Only this crate opens one (`build_report`, `checks::run`), and never forgets it: a scope
/// that is not dropped would leave its entry behind for another node at the same address.
pub(crate) struct MemoScope<'a> {
    key: usize,
    _node: std::marker::PhantomData<&'a Node>,
}

pub(crate) fn memo_scope(node: &Node) -> MemoScope<'_> {
    let key = node as *const Node as usize;
    let mut m = memo();
    match m.iter_mut().find(|e| e.0 == key) {
        Some(e) => e.1 += 1,
        None => m.push((key, 1, Slot::default())),
    }
    MemoScope {
        key,
        _node: std::marker::PhantomData,
    }
}

impl Drop for MemoScope<'_> {
    fn drop(&mut self) {
        let mut m = memo();
        if let Some(i) = m.iter().position(|e| e.0 == self.key) {
            m[i].1 -= 1;
            if m[i].1 == 0 {
                m.swap_remove(i);
            }
        }
    }
}

/// `compute(node)` kept in the node's memo while a scope for it is open, else computed each
/// time.
pub(super) fn memoized<T: Send + Sync + 'static>(node: &Node, compute: fn(&Node) -> T) -> Arc<T> {
    let key = node as *const Node as usize;
    let slot = memo().iter().find(|e| e.0 == key).map(|e| e.2.clone());
    match slot {
        Some(s) => s
            .cell::<T>()
            .get_or_init(|| Arc::new(compute(node)))
            .clone(),
        None => Arc::new(compute(node)),
    }
}
