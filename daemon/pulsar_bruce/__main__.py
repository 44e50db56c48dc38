from pulsar_bruce.cli import main

main()
