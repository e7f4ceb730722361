//! Label values of metrics, log fields and records come from the enums they
//! name, through strum's derives (`IntoStaticStr` for the value,
//! `EnumIter` for every value), never from a string list kept beside an
//! enum: a new variant is a new label everywhere at once.

/// The bounded label of an enum value.
pub trait Label: Copy + Into<&'static str> {
    fn label(self) -> &'static str {
        self.into()
    }
}

impl<T: Copy + Into<&'static str>> Label for T {}

/// Every label of an enum, in declaration order.
pub fn all<T: Label + strum::IntoEnumIterator>() -> impl Iterator<Item = &'static str> {
    T::iter().map(Label::label)
}
