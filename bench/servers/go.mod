module fernbench/servers

go 1.22
