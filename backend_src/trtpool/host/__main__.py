from trtpool.host.server import main

main()
