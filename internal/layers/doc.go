// Package layers holds no code: its test checks the module's import graph
// (each stage of the data flow imports only later stages, the table layout
// and the entry format hold no pdata, no product package imports a test
// server; the test environment's own packages in their order), from `go list`.
package layers
