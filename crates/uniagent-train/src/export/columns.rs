//! Column buffers for Parquet's low-level column writer: values plus the Dremel definition and
//! repetition levels, so that Arrow readers (pyarrow, pandas) see proper `list<...>` columns.
//!
//! Every list column uses the standard three-level `LIST` layout with nullable elements
//! (`<required|optional> group NAME (LIST) { repeated group list { optional T element; } }`),
//! which is what pyarrow itself writes for `list<T>`: a reader gets exactly `list<int64>` /
//! `list<float>`, not `list<T not null>`.

use parquet::column::writer::ColumnWriterImpl;
use parquet::data_type::DataType;
use parquet::errors::Result;

/// A list column being buffered: `values` holds only the present elements.
#[derive(Debug)]
pub(super) struct ListColumn<T> {
    /// Whether the list itself may be null (an `optional` group).
    nullable: bool,
    values: Vec<T>,
    def: Vec<i16>,
    rep: Vec<i16>,
}

impl<T> ListColumn<T> {
    pub(super) fn new(nullable: bool) -> Self {
        Self {
            nullable,
            values: Vec::new(),
            def: Vec::new(),
            rep: Vec::new(),
        }
    }

    /// Appends one row: `None` a null list (only for nullable columns), else its elements,
    /// each possibly null.
    pub(super) fn push(&mut self, list: Option<impl IntoIterator<Item = Option<T>>>) {
        // Levels: 0 = null list, `base` = empty list, `base + 1` = null element,
        // `base + 2` = a value; the first element of a row starts it (rep 0).
        let base = i16::from(self.nullable);
        let Some(items) = list else {
            debug_assert!(self.nullable, "a null list in a required column");
            self.def.push(0);
            self.rep.push(0);
            return;
        };
        let start = self.def.len();
        for (i, item) in items.into_iter().enumerate() {
            self.rep.push(i16::from(i > 0));
            match item {
                Some(v) => {
                    self.values.push(v);
                    self.def.push(base + 2);
                }
                None => self.def.push(base + 1),
            }
        }
        if self.def.len() == start {
            self.def.push(base);
            self.rep.push(0);
        }
    }

    /// Writes the buffered rows into `writer` and empties the buffer.
    pub(super) fn write<D>(&mut self, writer: &mut ColumnWriterImpl<'_, D>) -> Result<()>
    where
        D: DataType<T = T>,
    {
        writer.write_batch(&self.values, Some(&self.def), Some(&self.rep))?;
        self.values.clear();
        self.def.clear();
        self.rep.clear();
        Ok(())
    }
}

/// A flat column: `required` (every row has a value) or `optional` (null rows allowed).
#[derive(Debug)]
pub(super) struct FlatColumn<T> {
    nullable: bool,
    values: Vec<T>,
    def: Vec<i16>,
}

impl<T> FlatColumn<T> {
    pub(super) fn new(nullable: bool) -> Self {
        Self {
            nullable,
            values: Vec::new(),
            def: Vec::new(),
        }
    }

    /// Appends one row; `None` only in nullable columns.
    pub(super) fn push(&mut self, value: Option<T>) {
        debug_assert!(
            self.nullable || value.is_some(),
            "a null in a required column"
        );
        if self.nullable {
            self.def.push(i16::from(value.is_some()));
        }
        self.values.extend(value);
    }

    /// Writes the buffered rows into `writer` and empties the buffer.
    pub(super) fn write<D>(&mut self, writer: &mut ColumnWriterImpl<'_, D>) -> Result<()>
    where
        D: DataType<T = T>,
    {
        let def = self.nullable.then_some(self.def.as_slice());
        writer.write_batch(&self.values, def, None)?;
        self.values.clear();
        self.def.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_levels_follow_the_three_level_layout() {
        let mut c = ListColumn::<i64>::new(true);
        c.push(None::<Vec<Option<i64>>>);
        c.push(Some(Vec::new()));
        c.push(Some(vec![Some(1), None, Some(3)]));
        assert_eq!(c.values, [1, 3]);
        assert_eq!(c.def, [0, 1, 3, 2, 3]);
        assert_eq!(c.rep, [0, 0, 0, 1, 1]);

        let mut r = ListColumn::<i64>::new(false);
        r.push(Some(Vec::new()));
        r.push(Some(vec![Some(7), Some(8)]));
        assert_eq!(r.def, [0, 2, 2]);
        assert_eq!(r.rep, [0, 0, 1]);
    }

    #[test]
    fn flat_levels_only_for_nullable_columns() {
        let mut c = FlatColumn::<f64>::new(true);
        c.push(Some(1.0));
        c.push(None);
        assert_eq!(
            (c.values.as_slice(), c.def.as_slice()),
            (&[1.0][..], &[1, 0][..])
        );
        let mut r = FlatColumn::<i64>::new(false);
        r.push(Some(4));
        assert!(r.def.is_empty());
    }
}
