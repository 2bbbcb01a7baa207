"""The public API layer: thin functions that validate, build one problem and call
the dispatcher.  ``cupyconv`` re-exports every public name."""
