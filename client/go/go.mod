module github.com/sluice-dev/sluice/client/go

go 1.26
