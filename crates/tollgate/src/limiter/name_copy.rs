//! Each thread's own copy of a limit's name, for the [`LimitDecision`]s it makes.
//!
//! Every decision carries its limit's name as an `Arc<str>`, and cloning an `Arc` writes its
//! reference count. With one `Arc` per limit, every core deciding checks of the same limit
//! writes the same cache line, twice per decision (the clone, then the drop), and the line
//! bounces between cores: on two cores at 2 M decisions/s that was about a tenth of all the
//! time spent (`perf`: the `lock incq` of the clone). A thread's own copy, allocated by that
//! thread, is written by that thread alone.
//!
//! The copies are found by the address of the limit's own name and checked by content, so a
//! name freed (a reload) and another allocated at the same address is never answered with
//! the old text. A thread keeps at most [`MAX_COPIES`] names.
//!
//! [`LimitDecision`]: crate::LimitDecision

use std::cell::RefCell;
use std::sync::Arc;

/// Most names one thread keeps a copy of; past it, the oldest is dropped.
const MAX_COPIES: usize = 64;

thread_local! {
    static COPIES: RefCell<Vec<(usize, Arc<str>)>> = const { RefCell::new(Vec::new()) };
}

/// `name`, as this thread's own copy (equal text, another allocation).
pub(crate) fn name_copy(name: &Arc<str>) -> Arc<str> {
    let address = Arc::as_ptr(name).cast::<u8>() as usize;
    COPIES
        .try_with(|copies| {
            let mut copies = copies.borrow_mut();
            if let Some((_, copy)) = copies.iter().find(|(a, _)| *a == address)
                && **copy == **name
            {
                return Arc::clone(copy);
            }
            copies.retain(|(a, _)| *a != address);
            if copies.len() == MAX_COPIES {
                copies.remove(0);
            }
            let copy: Arc<str> = Arc::from(&**name);
            copies.push((address, Arc::clone(&copy)));
            copy
        })
        // The thread is exiting: its copies are gone, share the original.
        .unwrap_or_else(|_| Arc::clone(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_has_the_text_and_is_reused() {
        let name: Arc<str> = Arc::from("api");
        let a = name_copy(&name);
        let b = name_copy(&name);
        assert_eq!(&*a, "api");
        assert!(!Arc::ptr_eq(&a, &name), "a copy, not the original");
        assert!(Arc::ptr_eq(&a, &b), "the thread's copy is reused");
    }

    #[test]
    fn another_thread_has_its_own_copy() {
        let name: Arc<str> = Arc::from("api");
        let here = name_copy(&name);
        let there = std::thread::scope(|s| s.spawn(|| name_copy(&name)).join().expect("thread"));
        assert_eq!(&*there, "api");
        assert!(!Arc::ptr_eq(&here, &there));
    }

    #[test]
    fn a_new_name_at_a_freed_address_is_not_answered_with_the_old_text() {
        // Many rounds: the allocator reuses a freed address for a name of the same size.
        for i in 0..1000 {
            let name: Arc<str> = Arc::from(format!("n{:03}", i % 1000).as_str());
            assert_eq!(&*name_copy(&name), &*name);
        }
    }

    #[test]
    fn a_thread_keeps_a_bounded_number_of_copies() {
        let names: Vec<Arc<str>> = (0..MAX_COPIES * 2)
            .map(|i| Arc::from(format!("limit{i}").as_str()))
            .collect();
        for n in &names {
            assert_eq!(&*name_copy(n), &**n);
        }
        assert_eq!(COPIES.with(|c| c.borrow().len()), MAX_COPIES);
    }
}
