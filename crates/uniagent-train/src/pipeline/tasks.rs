//! [`TaskSource`]: the tasks RL draws from, epoch after epoch, in a seeded shuffled order.

use serde::{Deserialize, Serialize};
use uniagent_core::{Error, Result, Task};

/// Where the next task comes from; saved with a checkpoint so a resumed run continues with
/// the same data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskCursor {
    /// Completed epochs.
    pub epoch: usize,
    /// Position in the current epoch's order.
    pub index: usize,
}

/// A finite list of tasks served in epochs; each epoch's order is a shuffle seeded by the
/// source's seed and the epoch number (or the list order when shuffling is off).
///
/// ```
/// use uniagent_core::{Message, Task};
/// use uniagent_train::pipeline::TaskSource;
/// let tasks: Vec<Task> = (0..3).map(|i| Task::new(format!("t{i}"), vec![Message::user("q")])).collect();
/// let mut a = TaskSource::new(tasks.clone(), 42).with_epochs(Some(2));
/// let ids: Vec<String> = std::iter::from_fn(|| a.next_task()).map(|t| t.id).collect();
/// assert_eq!(ids.len(), 6); // two epochs, then exhausted
/// let mut b = TaskSource::new(tasks, 42).with_epochs(Some(2));
/// assert_eq!(b.take(4).unwrap().len(), 4);
/// assert!(b.take(3).is_err()); // only 2 left
/// ```
#[derive(Debug, Clone)]
pub struct TaskSource {
    tasks: Vec<Task>,
    seed: u64,
    shuffle: bool,
    epochs: Option<usize>,
    cursor: TaskCursor,
    order: Vec<usize>,
}

impl TaskSource {
    /// Shuffled epochs of `tasks`, without end.
    pub fn new(tasks: Vec<Task>, seed: u64) -> Self {
        let mut s = Self {
            tasks,
            seed,
            shuffle: true,
            epochs: None,
            cursor: TaskCursor { epoch: 0, index: 0 },
            order: Vec::new(),
        };
        s.order = s.epoch_order(0);
        s
    }

    /// Every task it serves, in the order given to [`Self::new`].
    pub fn tasks(&self) -> &[Task] {
        &self.tasks
    }

    /// Serves the tasks in the given order (every epoch the same).
    pub fn in_order(mut self) -> Self {
        self.shuffle = false;
        self.order = self.epoch_order(self.cursor.epoch);
        self
    }

    /// Stops after `epochs` passes (`None`: never).
    pub fn with_epochs(mut self, epochs: Option<usize>) -> Self {
        self.epochs = epochs;
        self
    }

    /// How many tasks one epoch has.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether there are no tasks at all.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// The position of the next task.
    pub fn cursor(&self) -> TaskCursor {
        self.cursor
    }

    /// Continues from a saved position.
    pub fn seek(&mut self, cursor: TaskCursor) {
        self.cursor = cursor;
        self.order = self.epoch_order(cursor.epoch);
    }

    fn epoch_order(&self, epoch: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.tasks.len()).collect();
        if self.shuffle {
            let mut rng = fastrand::Rng::with_seed(
                self.seed ^ (epoch as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            );
            rng.shuffle(&mut order);
        }
        order
    }

    /// The next task, or `None` when the epochs are done (or there are no tasks).
    pub fn next_task(&mut self) -> Option<Task> {
        if self.tasks.is_empty() {
            return None;
        }
        if self.cursor.index == self.order.len() {
            self.cursor = TaskCursor {
                epoch: self.cursor.epoch + 1,
                index: 0,
            };
            self.order = self.epoch_order(self.cursor.epoch);
        }
        if self.epochs.is_some_and(|e| self.cursor.epoch >= e) {
            return None;
        }
        let task = self.tasks[self.order[self.cursor.index]].clone();
        self.cursor.index += 1;
        Some(task)
    }

    /// The next `n` tasks; an error when the source runs out before.
    pub fn take(&mut self, n: usize) -> Result<Vec<Task>> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            match self.next_task() {
                Some(t) => out.push(t),
                None => {
                    return Err(Error::invalid_input(format!(
                        "the task source ran out after {} of {n} tasks",
                        out.len()
                    )))
                }
            }
        }
        Ok(out)
    }
}
