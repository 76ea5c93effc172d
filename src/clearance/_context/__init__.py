"""Context layer: clearances, the `ContextBuilder` choke point, prompt rendering."""
