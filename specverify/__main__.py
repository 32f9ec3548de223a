from specverify.cli import program

program()
