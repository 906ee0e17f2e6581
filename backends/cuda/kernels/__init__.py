"""One module per kernel template: each builds the template context of a group kind."""
