// Package schema holds postgrescopy's DDL as embedded, versioned SQL files and
// applies them: in order, once, under an advisory lock so that many collectors
// starting together migrate exactly once.
package schema
