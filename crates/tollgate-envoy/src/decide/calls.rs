//! [`Calls`]: the store calls of one `ShouldRateLimit` call, in turn: peeks that report
//! (too costly descriptors, or everything once the request is refused), the check-only
//! peek, and the one atomic call that charges.

use tollgate::{
    Ask, LimitDecision, Limiter, MAX_KEY_VALUE, Need, Op, Outcome, Request, Store, Verdict,
};
use tonic::Status;

use super::Group;
use super::answer::Answer;
use super::items::{Item, cost, rounds};
use super::rates;

/// The limiter a call is decided by, and whether refusals are charged.
pub(super) struct Calls<'l, St: Store> {
    pub(super) limiter: &'l Limiter<St>,
    /// `[envoy] refusals = "charged"`.
    pub(super) counting: bool,
}

impl<St: Store> Calls<'_, St> {
    /// Peeks `items` (charging nothing) and records what each limit's state is; `optional`:
    /// a quota descriptor outside the call passed.
    pub(super) async fn report(
        &self,
        answer: &mut Answer<'_>,
        items: &[&Item<'_>],
        optional: bool,
    ) -> Result<(), Status> {
        if items.is_empty() {
            return Ok(());
        }
        let mode = Mode {
            counting: false,
            optional,
        };
        for call in rounds(items).calls() {
            let verdict = run(self.limiter, call, Op::Peek, mode).await?;
            self.record(answer, call, &verdict, Op::Peek).await?;
        }
        Ok(())
    }

    /// Check only: whether a unit is left, charging nothing; when refusals are charged,
    /// whether the count is past the limit (the reference's answer). Quota ones join the
    /// group outside the call; whether an enforced one refuses the request.
    pub(super) async fn check_only(
        &self,
        answer: &mut Answer<'_>,
        peeked: &[&Item<'_>],
        group: &mut Group,
    ) -> Result<bool, Status> {
        if peeked.is_empty() {
            return Ok(false);
        }
        let mode = Mode {
            counting: self.counting,
            optional: group.passed,
        };
        for call in rounds(peeked).calls() {
            let verdict = run(self.limiter, call, Op::Peek, mode).await?;
            self.record(answer, call, &verdict, Op::Peek).await?;
        }
        let mut vetoed = false;
        for item in peeked {
            for (&slot, &(rule, _)) in item.slots.iter().zip(&item.each) {
                if rule.shadow {
                    continue;
                }
                let allowed = answer.outcomes[slot]
                    .as_ref()
                    .is_some_and(|d| d.decision.is_allowed());
                if answer.quota[slot] {
                    group.outside(allowed);
                } else if !allowed {
                    vetoed = true;
                }
            }
        }
        Ok(vetoed)
    }

    /// Decides every descriptor that can pass, each at its own cost, in one atomic store
    /// call: a check, or a peek when the request is already refused (all or nothing; a check
    /// anyway when refusals are charged, as the reference charges every descriptor). Sets
    /// whether the request is allowed.
    ///
    /// A shadow descriptor on a counter an enforced one also counts on (two rules naming one
    /// limit, a key they both build) is decided after that call, on the count it left: as
    /// the limiter decides every shadow entry, and as a later request would count on that
    /// counter. It is charged only when the request passed (or refusals are charged), and
    /// refuses nothing.
    pub(super) async fn charge(
        &self,
        answer: &mut Answer<'_>,
        fits: &[&Item<'_>],
        group: &Group,
        vetoed: bool,
    ) -> Result<(), Status> {
        let rounds = rounds(fits);
        let mut calls = rounds.calls();
        let together = calls.next().unwrap_or_default();
        self.charge_together(answer, together, group, vetoed)
            .await?;
        let op = if answer.allowed || self.counting {
            Op::Check
        } else {
            Op::Peek
        };
        let mode = Mode {
            counting: self.counting,
            optional: group.passed,
        };
        for shadow in calls {
            let verdict = run(self.limiter, shadow, op, mode).await?;
            self.record(answer, shadow, &verdict, op).await?;
        }
        Ok(())
    }

    /// [`Calls::charge`]'s one atomic call, of items that each name a counter once.
    async fn charge_together(
        &self,
        answer: &mut Answer<'_>,
        fits: &[&Item<'_>],
        group: &Group,
        vetoed: bool,
    ) -> Result<(), Status> {
        // The group refuses already when all of it outside the call refused and none of it
        // is in the call.
        // (One charged though too costly is over whatever the call says: not a member.)
        let in_call = fits.iter().any(|i| i.quota && !i.rule.shadow && !i.never);
        let group_refused = group.members > 0 && !group.passed && !in_call;
        answer.allowed = !vetoed && !group_refused;
        if fits.is_empty() {
            return Ok(());
        }
        let op = if answer.allowed || self.counting {
            Op::Check
        } else {
            Op::Peek
        };
        let mode = Mode {
            counting: self.counting,
            optional: group.passed,
        };
        // `run`'s two steps, written out: the charging call awaits the limiter here, not
        // through a layer of its own (docs/architecture.md counts the path).
        let request = prepare(self.limiter, fits, mode)?;
        let verdict = available(self.limiter.decide(&request, op).await)?;
        self.record(answer, fits, &verdict, op).await?;
        if self.counting {
            // Every descriptor was charged, each answered at its own count: the overall
            // code is the reference's, read from those answers (several quota descriptors
            // on one counter are one entry of the call, which refuses when their sum is over
            // though the first of them passed).
            answer.allowed &= by_descriptor(answer, fits, group, vetoed);
            return Ok(());
        }
        let admitted = verdict.outcome() == Outcome::Allowed;
        if admitted || op != Op::Check || !by_descriptor(answer, fits, group, vetoed) {
            answer.allowed &= admitted;
            return Ok(());
        }
        // Refused whole, nothing charged, yet by the reference's rule the request passes: a
        // quota entry of several descriptors on one counter whose first ones pass. Those are
        // charged, in a call of their own (its own atomic check: had the count moved
        // meanwhile, it refuses).
        let Some(passing) = passing_prefixes(answer, fits, self.limiter) else {
            answer.allowed = false;
            return Ok(());
        };
        let passing: Vec<&Item<'_>> = passing.iter().collect();
        let request = prepare(self.limiter, &passing, mode)?;
        let verdict = available(self.limiter.decide(&request, op).await)?;
        self.record(answer, &passing, &verdict, op).await?;
        answer.allowed &= verdict.outcome() == Outcome::Allowed;
        Ok(())
    }

    /// Records `verdict`, `batch` decided with `op`, descriptor by descriptor: several on one
    /// counter each at its own rate (`rates.rs`; one more peek for those whose count the
    /// decision cannot tell), and one too costly refused whatever its peek said.
    async fn record(
        &self,
        answer: &mut Answer<'_>,
        batch: &[&Item<'_>],
        verdict: &Verdict,
        op: Op,
    ) -> Result<(), Status> {
        let admitted = verdict.outcome() == Outcome::Allowed;
        // Each with whether the call charged it, and whether its descriptors are answered
        // each on its own (else: one descriptor whose count past the limit is read for its
        // statistics, counted refusals).
        let mut unread = Vec::new();
        for (&item, d) in batch.iter().zip(verdict.decisions()) {
            answer.fill(item, d);
            if !rates::splits(item, d) {
                if self.counting && op == Op::Check && rates::crossing_unread(item, d) {
                    unread.push((item, d, true, false));
                } else if item.too_costly() || item.never {
                    item.slots.iter().for_each(|&slot| answer.never(slot));
                }
                continue;
            }
            let charged =
                op == Op::Check && (self.counting || (admitted && d.decision.is_allowed()));
            match rates::count_before(&d.decision, cost(item), charged) {
                Some(count) => self.split(answer, item, d, count, charged),
                None => unread.push((item, d, charged, true)),
            }
        }
        if unread.is_empty() {
            return Ok(());
        }
        // Their decisions are clamped: read their counts with a peek at a wider limit.
        let wide: Vec<Option<Item<'_>>> = unread
            .iter()
            .map(|(item, ..)| rates::wide(item, self.limiter))
            .collect();
        let peeks: Vec<&Item<'_>> = wide.iter().flatten().collect();
        let mode = Mode {
            counting: false,
            optional: false,
        };
        let read = run(self.limiter, &peeks, Op::Peek, mode).await?;
        let mut read = read.decisions().iter();
        for ((item, d, charged, splits), wide) in unread.into_iter().zip(&wide) {
            let count = wide
                .as_ref()
                .and_then(|_| read.next())
                .and_then(|w| rates::count_from_wide(item, w, charged));
            match count {
                Some(count) if splits => self.split(answer, item, d, count, charged),
                Some(count) => answer.after[item.slots[0]] = Some(count + item.cost),
                None if item.too_costly() || item.never => {
                    item.slots.iter().for_each(|&slot| answer.never(slot));
                }
                None => {}
            }
        }
        Ok(())
    }

    /// Answers each descriptor of `item` at its own rate from `count`, the counter before
    /// the call.
    fn split(
        &self,
        answer: &mut Answer<'_>,
        item: &Item<'_>,
        d: &LimitDecision,
        count: u64,
        charged: bool,
    ) {
        for (slot, rule, decided, after) in rates::answers(item, d, count, charged, self.counting) {
            if self.counting && charged && !decided.decision.is_allowed() {
                answer.after[slot] = Some(after);
            }
            answer.set(slot, rule, decided);
        }
    }
}

/// The reference's overall code from each descriptor's own answer (`ratelimit.go`,
/// `shouldRateLimitWorker`): over when an enforced descriptor that is not a quota one is
/// over (`vetoed`: one outside `fits`), or when there are quota descriptors (`group`: those
/// outside `fits`) and every one of them is over. Shadow descriptors refuse nothing.
fn by_descriptor(answer: &Answer<'_>, fits: &[&Item<'_>], group: &Group, vetoed: bool) -> bool {
    let (mut members, mut passed) = (group.members, group.passed);
    for item in fits.iter().filter(|i| !i.rule.shadow) {
        for &slot in &item.slots {
            let allowed = answer.outcomes[slot]
                .as_ref()
                .is_some_and(|d| d.decision.is_allowed());
            if answer.quota[slot] {
                members += 1;
                passed |= allowed;
            } else if !allowed {
                return false;
            }
        }
    }
    !vetoed && (members == 0 || passed)
}

/// `fits` again, each quota entry of several descriptors cut to the descriptors that lead it
/// and pass (answered so by the refused call); `None` when one passes only after one that is
/// over (rates differing on one counter): no cut charges just the passing ones.
fn passing_prefixes<'a, St: Store>(
    answer: &Answer<'_>,
    fits: &[&Item<'a>],
    limiter: &Limiter<St>,
) -> Option<Vec<Item<'a>>> {
    let allowed = |slot: usize| {
        answer.outcomes[slot]
            .as_ref()
            .is_some_and(|d| d.decision.is_allowed())
    };
    let mut out = Vec::with_capacity(fits.len());
    for &item in fits {
        let lead = item.slots.iter().take_while(|&&s| allowed(s)).count();
        if !item.quota || item.rule.shadow || item.slots.len() < 2 || lead == item.slots.len() {
            out.push(item.clone());
            continue;
        }
        if item.slots[lead..].iter().any(|&s| allowed(s)) {
            return None;
        }
        if lead == 0 {
            // Over, all of it: refused, charged nothing, as the any-of group lets it.
            out.push(item.clone());
            continue;
        }
        let mut cut = item.clone();
        cut.slots.truncate(lead);
        cut.each.truncate(lead);
        cut.cost = cut
            .each
            .iter()
            .map(|&(_, c)| c)
            .fold(0, u64::saturating_add);
        cut.capacity = cut.rule.capacity;
        cut.limit = None;
        rates::effective(&mut cut, limiter);
        out.push(cut);
    }
    Some(out)
}

/// How a call's request is prepared.
#[derive(Debug, Clone, Copy)]
struct Mode {
    /// Count refusals (`[envoy] refusals = "charged"`): a check charges every entry, a peek
    /// answers from the count as it stands ([`tollgate::Request::count_refusals`]).
    counting: bool,
    /// A quota descriptor outside the call passed: the quota ones in it are optional.
    optional: bool,
}

/// Prepares `batch` (each item with its own key and cost, shadow rules as shadow entries) and
/// decides it with `op` in one store call.
async fn run<St: Store>(
    limiter: &Limiter<St>,
    batch: &[&Item<'_>],
    op: Op,
    mode: Mode,
) -> Result<Verdict, Status> {
    let request = prepare(limiter, batch, mode)?;
    available(limiter.decide(&request, op).await)
}

/// `batch` as one request: each item with its own key and cost, shadow rules as shadow
/// entries.
fn prepare<'a, St: Store>(
    limiter: &'a Limiter<St>,
    batch: &[&'a Item<'a>],
    mode: Mode,
) -> Result<Request<'a>, Status> {
    let need = if mode.optional {
        Need::Optional
    } else {
        Need::OneOf
    };
    // A value the core would refuse, named by its descriptor and entry (the core's error
    // names only the key part, `d0`, which the caller never wrote).
    for item in batch {
        if let Some((part, value)) = item.parts.iter().find(|(_, v)| v.len() > MAX_KEY_VALUE) {
            let at = match part.strip_prefix('d').and_then(|n| n.parse::<usize>().ok()) {
                Some(entry) => format!("descriptors[{}].entries[{entry}].value", item.slots[0]),
                None => format!("descriptors[{}] (key part {part:?})", item.slots[0]),
            };
            return Err(Status::invalid_argument(format!(
                "{at}: {} bytes, longer than {MAX_KEY_VALUE} bytes",
                value.len()
            )));
        }
    }
    let asks = batch.iter().map(|item| {
        let rule = item.rule;
        // A descriptor's `limit` override (matching/overrides.rs), or the limit of several
        // descriptors at different rates (rates.rs): a limit made for this request.
        let ask = match item.limit.as_deref().or(rule.own.as_deref()) {
            Some(own) => Ask::limit(own, &item.parts),
            None => Ask::named(&rule.limit, &item.parts),
        };
        let ask = ask.cost(cost(item)).shadow(rule.shadow);
        if item.never {
            // Over at its own rate whatever its wide limit says: its refusal is the caller's
            // (`decide`: the request vetoed, or a quota member outside the call over).
            ask.need(Need::Optional)
        } else if item.quota && !rule.shadow {
            ask.need(need)
        } else {
            ask
        }
    });
    let mut request = limiter
        .prepare_with(asks)
        .map_err(|error| Status::invalid_argument(error.to_string()))?;
    if mode.counting {
        // A check charges every descriptor; a peek (check only) answers from the count as
        // it stands, refused only past the limit.
        request
            .count_refusals()
            .map_err(|error| Status::invalid_argument(error.to_string()))?;
    }
    Ok(request)
}

/// `verdict`, unless the store failed and a limit's policy refused: `UNAVAILABLE`.
fn available(verdict: Verdict) -> Result<Verdict, Status> {
    if let Outcome::Unavailable { .. } = verdict.outcome() {
        return Err(Status::unavailable(
            "rate limit store unavailable and a limit's failure policy is deny",
        ));
    }
    Ok(verdict)
}
