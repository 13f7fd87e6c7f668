//! The row every finding family's table is made of: an id, its one-line title and its page.

/// A finding id with its one-line title and its page.
#[derive(Debug)]
pub struct FindingDef {
    /// Stable id, `category.name`.
    pub id: &'static str,
    /// One lowercase line for `gdrdoctor list`.
    pub title: &'static str,
    /// The long-form page, `docs/checks/<id>.md`, embedded (what `gdrdoctor explain` prints).
    pub page: &'static str,
}

/// A finding row: the page is found from the id.
macro_rules! finding {
    ($id:literal, $title:literal) => {
        $crate::findings::def::FindingDef {
            id: $id,
            title: $title,
            page: include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../docs/checks/",
                $id,
                ".md"
            )),
        }
    };
}

pub(crate) use finding;
