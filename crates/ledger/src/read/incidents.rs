//! Incidents: an entry and the entries flagged as its duplicates, with the operator's review.

use super::{summary_row, Where, ENTRY_COLS};
use crate::db::{vals, Db};
use crate::error::Result;
use crate::model::{Incident, Millis, Page, Review};

/// Incidents, newest first: each a first entry and the entries flagged as its duplicates, keyed
/// for paging by its newest suspect's id, with the operator's review if it has one.
pub(crate) fn incidents(db: &mut dyn Db, page: Page, now: Millis) -> Result<Vec<Incident>> {
    let mut w = Where::default();
    w.and("duplicate_of IS NOT NULL");
    if let Some(b) = page.before {
        w.and_p("id < ?", b);
    }
    let sql = format!(
        "SELECT duplicate_of, MAX(id) AS last FROM entries{} \
         GROUP BY duplicate_of ORDER BY last DESC LIMIT {}",
        w.sql,
        page.limit.clamp(1, 1000)
    );
    let groups = db.all(&sql, &w.params(), |r| Ok((r.int(0)?, r.int(1)?)))?;
    let mut out = Vec::with_capacity(groups.len());
    for (first, last) in groups {
        let entries = db.all(
            &format!(
                "SELECT {ENTRY_COLS} FROM entries WHERE id = ?1 \
                 UNION ALL SELECT {ENTRY_COLS} FROM entries WHERE duplicate_of = ?1 \
                 ORDER BY id LIMIT 100"
            ),
            vals![first],
            summary_row(now),
        )?;
        // Titled from the first entry, or from its oldest suspect when it was purged.
        let Some(head) = entries.first() else {
            continue;
        };
        let review = review_of(db, first)?;
        let mut incident = Incident {
            id: first,
            route: head.route.clone(),
            scope: head.scope.clone(),
            fingerprint: head.fingerprint.clone(),
            subjects: head.subjects.clone(),
            first_purged: head.id != first,
            open: review.as_ref().is_none_or(|r| last > r.through),
            review,
            entries,
            title: String::new(),
        };
        incident.title = crate::model::headline::incident(&incident);
        out.push(incident);
    }
    Ok(out)
}

/// The review of the incident whose first entry is `first`, if it has one.
pub(crate) fn review_of(db: &mut dyn Db, first: i64) -> Result<Option<Review>> {
    db.opt(
        "SELECT operator, reason, at, through FROM reviews WHERE entry_id = ?1",
        vals![first],
        |r| {
            Ok(Review {
                operator: r.text(0)?,
                reason: r.text(1)?,
                at: r.int(2)?,
                through: r.int(3)?,
            })
        },
    )
}
