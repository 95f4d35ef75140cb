module fernbench

go 1.22
